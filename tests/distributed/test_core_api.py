"""``core.init()`` under torchrun: the ranks come from torchrun's environment, the searcher's one
operation reaches every rank, and a checkpoint the chief stores is restored on every rank."""

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
