"""``torch_batch_process`` against Determined 0.38.1's: the same jobs
(``tests/fixtures/batch_parity.py``, both in one child process) process the same batches in the
same order, write the same checkpoints (byte for byte, but the ids) and the same outputs,
report the same metrics, and refuse the same arguments with the same messages."""

import json
from typing import Any, Dict

import pytest

from det_lightning.pytorch._checkpoint import OUTPUTS_MARKER
from det_lightning.pytorch.experimental._torch_batch_process import JOB_KEY, REDUCERS_FILE
from tests.fixtures.child import run_json

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("batch_parity")
    return run_json("tests.fixtures.batch_parity", str(workdir))


def _comparable(record: Dict[str, Any]) -> Dict[str, Any]:
    """The record with ids named by role, and what only ours writes set aside: the reducers'
    state in each checkpoint, which job wrote it (in metadata.json: a plain run resumes only
    its own job's), and the ``.outputs`` mark of the outputs folder (which keeps checkpoint
    listings and sweeps off it)."""
    out = dict(record)
    (output_id,) = record["outputs"] or [None]
    checkpoints = []
    for checkpoint in record["checkpoints"]:
        files = {k: v for k, v in checkpoint["files"].items() if k != REDUCERS_FILE}
        metadata = json.loads(files["metadata.json"])
        assert metadata["default_output_uuid"] == output_id
        metadata["default_output_uuid"] = "<outputs>"
        metadata.pop(JOB_KEY, None)
        files["metadata.json"] = json.dumps(metadata, indent=2)  # its keys in their order
        checkpoints.append(files)
    out["checkpoints"] = checkpoints
    out["outputs"] = [
        {k: v for k, v in files.items() if k != OUTPUTS_MARKER}
        for files in record["outputs"].values()
    ]
    return out


SAME = ["plain", "kwargs", "too_many", "zero", "shuffle", "sampler", "batch_sampler"]
SAME += ["two_sizes", "interval"]


@pytest.mark.parametrize("job", SAME)
def test_the_same_job_does_the_same(records: Dict[str, Dict[str, Any]], job: str) -> None:
    theirs, ours = records[job]["determined"], records[job]["det_lightning"]
    assert _comparable(ours) == _comparable(theirs)


def test_what_the_jobs_cover(records: Dict[str, Dict[str, Any]]) -> None:
    plain = records["plain"]["determined"]
    batches = [c for c in plain["calls"] if c[0] == "batch"]
    assert [b[1] for b in batches] == [0, 1, 2, 3, 4, 5]
    assert batches[-1][2] == [[20, 400], [21, 441], [22, 484]]  # the short last batch
    assert plain["calls"][0] == ["init", "cpu", False]  # eval mode, the default device
    assert [c[0] for c in plain["calls"]].count("checkpoint") == 3
    steps = [
        json.loads(c["files"]["metadata.json"])["steps_completed"] for c in plain["checkpoints"]
    ]
    assert steps == [2, 4, 6]
    assert plain["reported"] == [[6, {"total": 4048, "firsts": [0, 4, 8]}]]
    assert len(next(iter(plain["outputs"].values()))) == 6  # rank_0/out<i>.json each
    assert records["kwargs"]["determined"]["calls"][-2:] == [["checkpoint"], ["finish"]]
    assert "exceeds sharded dataset length" in records["too_many"]["determined"]["warnings"][0]
    assert "is not valid" in records["zero"]["determined"]["warnings"][0]
    for refused in ("shuffle", "sampler", "batch_sampler", "two_sizes", "interval"):
        assert records[refused]["determined"]["raised"][0] == "ValueError", refused


def test_a_dataset_without_a_length_is_refused_saying_why(
    records: Dict[str, Dict[str, Any]],
) -> None:
    theirs, ours = records["unsized"]["determined"], records["unsized"]["det_lightning"]
    assert theirs["raised"] == ["Exception", "Dataset must implement __len__()"]
    assert ours["raised"][0] == "TypeError"  # an Exception, as Determined's
    assert ours["raised"][1].startswith("Dataset must implement __len__()")
    assert "map-style" in ours["raised"][1]


def test_a_resumed_job_reports_every_batchs_metrics(records: Dict[str, Dict[str, Any]]) -> None:
    """Both resume after the checkpoint at 2 batches and process batches 2 to 5 into the same
    outputs folder. Determined's reducers start empty, so its metrics cover only batches 2 to
    5; ours carry the reducers' state in the checkpoint and report a straight run's."""
    theirs, ours = records["resumed"]["determined"], records["resumed"]["det_lightning"]
    assert [c[1] for c in theirs["calls"] if c[0] == "batch"] == [2, 3, 4, 5]
    comparable = {k: v for k, v in _comparable(ours).items() if k != "reported"}
    assert comparable == {k: v for k, v in _comparable(theirs).items() if k != "reported"}
    assert ours["reported"] == records["plain"]["det_lightning"]["reported"]
    first_two_batches = sum(i + i * i for i in range(8))
    assert theirs["reported"] == [[6, {"total": 4048 - first_two_batches, "firsts": [8, 12, 16]}]]
