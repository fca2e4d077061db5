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


@pytest.mark.parametrize("stopping_rank", [0, 1])
def test_one_rank_asking_to_stop_stops_every_rank_at_the_same_batch(
    tmp_path: pathlib.Path, stopping_rank: int
) -> None:
    job = jobs.run(
        [PROBE, *COMMON, "--stop-rank", str(stopping_rank), "--stop-batch", "5"],
        tmp_path / "stop", timeout=150,
    )
    assert job.seconds < 140, f"the job hung until killed:\n{job.output[-3000:]}"
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
        tmp_path / "crash", timeout=150,
    )
    assert job.returncode != 0
    expected = "while validating" if phase == "validation" else "while checkpointing"
    assert f"probe crash on rank {crashing_rank} {expected}" in job.output
    assert job.seconds < 140, f"the job hung until killed:\n{job.output[-3000:]}"
    assert not (tmp_path / "crash" / "out").exists()
