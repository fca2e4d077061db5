"""``core.init()`` in local mode against the real Determined 0.38.1's, on the same custom loop
(``tests/fixtures/core_loop.py``, both APIs in one child process): what each call returns or
raises, and what each checkpoint holds."""

import re
from typing import Any, Dict

import pytest

from tests.fixtures.child import run_json

pytestmark = [pytest.mark.interop, pytest.mark.slow]

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
# Where det_lightning differs on purpose (docs/notes/core-api.md).
DIFFERS = {
    "layout": "fresh storage ids",
    "after_delete": "fresh storage ids",
    "metadata": "get_metadata() reads metadata.json (Determined's local mode raises)",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    workdir = tmp_path_factory.mktemp("core_loop")
    return run_json("tests.fixtures.core_loop", str(workdir))


def test_the_loop_sees_what_it_sees_under_determined(records: Dict[str, Any]) -> None:
    theirs, ours = records["determined"], records["det_lightning"]
    assert set(ours) == set(theirs)
    same = {k: ours[k] for k in ours if k not in DIFFERS}
    assert same == {k: theirs[k] for k in theirs if k not in DIFFERS}
    # What the test covers, as Determined does it:
    assert theirs["operations"] == [1] and theirs["preempt"] is False and theirs["info"] is None
    assert theirs["stored"]["model.txt"] == "w=3" and "metadata.json" in theirs["stored"]
    assert theirs["restore_deleted"] == ["raised", "CheckpointNotFound"]
    assert (
        "report_training_metrics(steps_completed=1, metrics={'loss': 1.0})"
        in (theirs["report_lines"])
    )


def test_the_storage_holds_one_directory_per_checkpoint(records: Dict[str, Any]) -> None:
    """``<storage>/<uuid>/``, nothing else (no partial or deleted directory left behind)."""
    for record in records.values():
        for key in ("layout", "after_delete"):
            assert len(record[key]) == 1 and UUID.match(record[key][0]), record[key]


def test_get_metadata_reads_the_checkpoints_metadata(records: Dict[str, Any]) -> None:
    assert records["determined"]["metadata"] == ["raised", "NotImplementedError"]
    assert records["det_lightning"]["metadata"] == ["returned", {"steps_completed": 3, "note": "a"}]
