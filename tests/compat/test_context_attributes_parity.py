"""The context's attributes, read by trials at the moments they read them, against the real
Determined 0.38.1 in a child process (``tests/fixtures/attribute_snapshot.py``)."""

import json
import pathlib
import subprocess
import sys
from typing import Any, Dict, List

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def _snapshots(names: List[str]) -> Dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.attribute_snapshot", json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=pathlib.Path(__file__).parents[2],  # the repository root: `tests` imports
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_epoch_len_is_determineds_at_every_moment() -> None:
    """BYOL (determined-ai/determined-examples: computer_vision/byol_pytorch) reads
    ``self.context._epoch_len`` in ``train_batch`` to schedule its learning rate: None in the
    trial's ``__init__``, then the training loader's length (here 60 records / 8 = 8)."""
    seen = _snapshots(["_epoch_len"])
    theirs, ours = seen["determined"], seen["det_lightning"]
    assert theirs["init"]["_epoch_len"] == ["NoneType", None]
    assert theirs["train"]["_epoch_len"] == ["int", 8]
    assert ours == theirs
