"""``det.InvalidHP`` raised inside ``with pytorch.init()`` outside a search: as in Determined
0.38.1, the early exit is reported, the batches trained since the last checkpoint are
checkpointed, and the process exits with status 0 (rejecting hyperparameters is not an error).
Both run the same script in a child process (Determined's ``exit(0)`` ends the process)."""

import json
import pathlib
import subprocess
import sys
from typing import List, Tuple

import pytest

from tests.integration.cli_support import REPO_ROOT

pytestmark = pytest.mark.interop

SCRIPT = """
import logging, os, sys
sys.path.insert(0, {repo!r})
if os.environ["API"] == "det_lightning":
    import det_lightning as det
    from det_lightning import pytorch
else:
    import determined as det
    from determined import pytorch
from tests.fixtures.trials import make_trials

WHERE = os.environ["WHERE"]

class Rejecting(make_trials(pytorch)["MLPTrial"]):
    def __init__(self, context):
        if WHERE == "init":
            raise det.InvalidHP("hidden too small")
        super().__init__(context)

    def train_batch(self, batch, epoch_idx, batch_idx):
        if WHERE == "train" and batch_idx == 5:
            raise det.InvalidHP("diverged")
        return super().train_batch(batch, epoch_idx, batch_idx)

logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
with pytorch.init(hparams={{}}) as context:
    trial = Rejecting(context)
    pytorch.Trainer(trial, context).fit(
        max_length=pytorch.Batch(8), validation_period=pytorch.Batch(3),
        checkpoint_period=pytorch.Batch(100), checkpoint_policy="all",
    )
print("after fit")
"""


def _run(tmp_path: pathlib.Path, api: str, where: str) -> Tuple[int, str, List[int]]:
    """Exit status, the early-exit log lines, and each checkpoint's steps_completed."""
    base = tmp_path / api / where
    work, storage = base / "work", base / "checkpoints"
    work.mkdir(parents=True)
    script = base / "script.py"
    script.write_text(SCRIPT.format(repo=str(REPO_ROOT)))
    env = {
        "API": api,
        "WHERE": where,
        "OMP_NUM_THREADS": "1",
        "PATH": "/usr/bin:/bin",
        "DET_LIGHTNING_CHECKPOINT_DIR": str(storage),
        "XDG_DATA_HOME": str(storage),
        "DET_LIGHTNING_TENSORBOARD_DIR": str(base / "tb"),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    }
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [
        line.split(": ", 2)[-1]
        for line in result.stderr.splitlines()
        if "InvalidHP" in line or "early_exit" in line
    ]
    steps = sorted(
        json.loads(p.read_text())["steps_completed"] for p in storage.rglob("metadata.json")
    )
    assert "after fit" not in result.stdout  # the exit ends the script at the with-block
    return result.returncode, "\n".join(lines), steps


@pytest.mark.parametrize("where", ["init", "train"])
def test_invalid_hp_exits_0_with_a_checkpoint_like_determined(
    tmp_path: pathlib.Path, where: str
) -> None:
    theirs = _run(tmp_path, "determined", where)
    ours = _run(tmp_path, "det_lightning", where)
    assert theirs[0] == 0, theirs
    assert ours == theirs
