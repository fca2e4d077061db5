"""``core.init()`` under torchrun: the ranks come from torchrun's environment, the searcher's one
operation reaches every rank, and a checkpoint the chief stores is restored on every rank."""

import json
import pathlib

import pytest

from tests.distributed import jobs

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = pathlib.Path(__file__).parent / "scripts" / "core_probe.py"


def test_core_init_under_torchrun(tmp_path: pathlib.Path) -> None:
    job = jobs.run([*jobs.TORCHRUN, str(SCRIPT)], tmp_path)
    chief, worker = job.ranks(2)
    for rank, seen in enumerate((chief, worker)):
        assert (seen["rank"], seen["size"], seen["local_rank"]) == (rank, 2, rank)
        assert seen["everyone"] == [0, 10]
        assert seen["preempt"] is False
        assert seen["lengths"] == [1]
        assert seen["restored"] == "w=1"
    assert len(job.checkpoints()) == 1


def test_sigterm_to_the_chief_stops_every_rank_after_the_same_step(tmp_path: pathlib.Path) -> None:
    """WorkersAskChief: the chief's ``should_preempt()`` answer is broadcast, so a SIGTERM
    only the chief got stops both ranks after step 3; each leaves ``core.init()``'s block with
    status 75, which torchrun reports as the ranks' exit code."""
    script = pathlib.Path(__file__).parent / "scripts" / "core_preempt.py"
    job = jobs.run([*jobs.TORCHRUN, str(script)], tmp_path)
    assert not job.hung, job.output[-6000:]
    assert job.returncode != 0 and "exitcode  : 75" in job.output, job.output[-6000:]
    for rank in (0, 1):
        steps = json.loads((tmp_path / "out" / f"rank{rank}.json").read_text())
        assert steps == [1, 2, 3, "preempted"], (rank, job.output[-6000:])
    assert job.output.count("Stopped by SIGTERM: the loop returned at should_preempt()") == 1
    newest = max(job.checkpoints(), key=lambda p: int((p / "step.txt").read_text()))
    assert (newest / "step.txt").read_text() == "3"
