"""``DetCallback`` against Determined 0.38.1's ``determined.transformers.DetCallback``: the
same Hugging Face ``Trainer`` loop (``tests/fixtures/hf_parity.py``, both in one child process)
reports the same metrics and progress at the same steps, and uploads the same checkpoints
(every file bit-identical, the same metadata), each with its API's local ``core.init()``."""

from typing import Any, Dict

import pytest

from det_lightning.transformers._hf_callback import LOCK_FILE
from tests.fixtures.child import run_json

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    workdir = tmp_path_factory.mktemp("hf_parity")
    return run_json("tests.fixtures.hf_parity", str(workdir))


def test_the_same_reports_at_the_same_steps(records: Dict[str, Any]) -> None:
    theirs, ours = records["determined"]["calls"], records["det_lightning"]["calls"]
    assert ours == theirs
    # What it covers: training metrics every 2 steps (filter_metrics=["loss"] keeps loss and
    # the searcher's eval_loss), an evaluation every 4, the end's averages not reported again,
    # the Trainer's timings left out, and progress in 1% steps of max_steps.
    reported = [(c[1], c[2]) for c in theirs if c[0] == "metrics"]
    assert reported == [
        *[("training", 2), ("training", 4), ("validation", 4), ("training", 6)],
        *[("training", 8), ("validation", 8), ("training", 10), ("training", 12)],
        ("validation", 12),
    ]
    assert theirs[2][3].keys() == {"batches", "epochs", "loss"}
    assert theirs[6][3].keys() == {"batches", "epochs", "eval_loss"}
    assert [c[1] for c in theirs if c[0] == "progress"][-1] == 1.0


def test_the_same_checkpoints(records: Dict[str, Any]) -> None:
    theirs, ours = records["determined"], records["det_lightning"]
    assert ours["checkpoints"] == theirs["checkpoints"]
    assert [c["metadata.json"] for c in theirs["checkpoints"]] == [
        {"steps_completed": steps, "trial_id": 7} for steps in (4, 8, 12)
    ]
    assert "checkpoint-12/my_data.json" in theirs["checkpoints"][2]
    # Ours also leaves the lock a run holds on its output_dir (a hidden file).
    assert [f for f in ours["output_dir"] if f != LOCK_FILE] == theirs["output_dir"]
    assert LOCK_FILE in ours["output_dir"]
    assert ours["output_metadata"] == theirs["output_metadata"]
