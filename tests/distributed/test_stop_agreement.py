"""A stop asked for by one rank, or an error on one rank, ends every rank of a 2-process job.

``context.set_stop_requested(True)`` on one rank alone must stop every rank after the same
batch, with one checkpoint of that batch (a rank that stopped alone would leave the other
waiting in the next collective forever). An error on one rank while validating or
checkpointing must end the job with that rank's error instead of hanging.
"""

import json
import pathlib

import pytest

from tests.distributed import jobs

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

PROBE = str(jobs.PROBE)
COMMON = ["--out", "out", "--devices", "2", "--accelerator", "cpu", "--batches", "12"]


@pytest.mark.new_interpreters  # Lightning's launcher: rank 0 a real interpreter
@pytest.mark.parametrize("stopping_rank", [0, 1])
def test_one_rank_asking_to_stop_stops_every_rank_at_the_same_batch(
    tmp_path: pathlib.Path, stopping_rank: int
) -> None:
    job = jobs.run(
        [PROBE, *COMMON, "--stop-rank", str(stopping_rank), "--stop-batch", "5"],
        tmp_path / "stop",
        timeout=400,
    )
    assert not job.hung, f"the job hung until killed:\n{job.output[-3000:]}"
    ranks = job.ranks(2)
    # Batch 5 (the sixth) is trained, then every rank stops: 6 batches, not 12.
    assert [r["batches_trained"] for r in ranks] == [6, 6]
    assert [len(r["losses"]) for r in ranks] == [6, 6]
    assert ranks[0]["weights"] == ranks[1]["weights"]
    [checkpoint] = job.checkpoints()
    assert json.loads((checkpoint / "metadata.json").read_text())["steps_completed"] == 6
    for r in ranks:
        assert r["events"][-1] == ["shutdown", 0]


@pytest.mark.parametrize("phase", ["validation", "checkpoint"])
@pytest.mark.parametrize("crashing_rank", [0, 1])
def test_an_error_on_one_rank_while_validating_or_checkpointing_ends_the_job(
    tmp_path: pathlib.Path, phase: str, crashing_rank: int
) -> None:
    job = jobs.run(
        [PROBE, *COMMON, "--crash-phase", phase, "--crash-rank", str(crashing_rank)],
        tmp_path / "crash",
        timeout=400,
    )
    assert job.returncode != 0
    expected = "while validating" if phase == "validation" else "while checkpointing"
    assert f"probe crash on rank {crashing_rank} {expected}" in job.output
    assert not job.hung, f"the job hung until killed:\n{job.output[-3000:]}"
    assert not (tmp_path / "crash" / "out").exists()


def _agreement_batches(tmp_path: pathlib.Path, env: "dict[str, str]") -> "list[dict[int, int]]":
    """40 batches, no period boundary before the end: the collectives each rank ran after each
    batch. DDP's gradient all-reduce runs in C++ inside backward and is not counted."""
    job = jobs.run(
        [
            PROBE,
            "--out",
            "out",
            "--devices",
            "2",
            "--accelerator",
            "cpu",
            "--batches",
            "40",
            "--validation-period",
            "1000",
            "--reporting-period",
            "1000",
            "--count-collectives",
        ],
        tmp_path / "count",
        timeout=150,
        env=env,
    )
    return [{int(b): n for b, n in rank["collectives"].items()} for rank in job.ranks(2)]


def test_no_collective_runs_between_agreement_points(tmp_path: pathlib.Path) -> None:
    """With the interval fixed at 16 batches, the ranks agree after batches 16 and 32 (and at
    the end), one collective each, and no other collective (ours or Lightning's per-batch
    SIGTERM broadcast) runs after any other batch."""
    from det_lightning.adapters.preemption import STOP_AGREEMENT_ENV

    for per_batch in _agreement_batches(tmp_path, {STOP_AGREEMENT_ENV: "16"}):
        between = {b: n for b, n in per_batch.items() if b not in (16, 32, 40)}
        assert between == {}, per_batch
        assert per_batch.get(16) == per_batch.get(32) == 1, per_batch


def test_the_adaptive_interval_is_the_same_on_every_rank(tmp_path: pathlib.Path) -> None:
    """Left to adapt, the first agreement is after FIRST_AGREEMENT batches; the next comes when
    the largest rank's proposal says, and every rank agrees after exactly the same batches."""
    from det_lightning.adapters.preemption import FIRST_AGREEMENT

    first, second = _agreement_batches(tmp_path, {})
    assert first == second
    assert min(first) == FIRST_AGREEMENT == 16
    assert all(n == 1 for b, n in first.items() if b != 40), first
