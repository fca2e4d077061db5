"""Warm start beside the real Determined 0.38.1: a checkpoint of another trial (a cluster
trial's) restores weights, optimizer, callbacks and random state, and training starts at batch 0.
"""

import pathlib
import pickle
import shutil
from typing import Any, Dict

import pytest
import torch
from determined import pytorch as det_pytorch

from det_lightning import pytorch as dl_pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.run import run_trial

pytestmark = pytest.mark.interop

HPARAMS: Dict[str, Any] = {"lr": 0.05, "dropout": 0.3, "batch_size": 8}
ANCIENT = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "ancient"


def _warm(api: Any, path: pathlib.Path, trial: str = "MLPTrial") -> Any:
    fit_kwargs = dict(
        max_length=api.Batch(12), validation_period=api.Batch(6), checkpoint_policy="none"
    )
    if api is dl_pytorch:
        fitted, _ = run_trial(
            api,
            trial,
            HPARAMS,
            seed=5,
            latest_checkpoint=str(path),
            trainer_kwargs={"checkpoint_dir": str(path.parent / "out")},
            **fit_kwargs,
        )
        return fitted
    # Determined's local mode finds a checkpoint by UUID in its storage directory.
    storage = pathlib.Path.cwd().parent / "determined-storage" / "determined"
    shutil.copytree(path, storage / path.name)
    with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
        fitted, _ = run_trial(
            api, trial, HPARAMS, seed=5, latest_checkpoint=path.name, **fit_kwargs
        )
    return fitted


def test_a_checkpoint_of_another_trial_warm_starts_like_determined(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", str(tmp_path / "first"))
    run_trial(
        dl_pytorch, "MLPTrial", HPARAMS, max_length=dl_pytorch.Batch(5), checkpoint_policy="none"
    )
    (written,) = [p for p in (tmp_path / "first").iterdir() if ckpt.is_complete(p)]
    state = ckpt.read_trial_state(written)
    assert state is not None and state["batches_trained"] == 5
    (written / ckpt.TRIAL_STATE_FILE).write_bytes(pickle.dumps({**state, "trial_id": 7}))
    path = pathlib.Path(shutil.copytree(written, tmp_path / "warm" / written.name))

    theirs = _warm(det_pytorch, path)
    ours = _warm(dl_pytorch, path)
    assert len(ours.recorder.batch_losses) == len(theirs.recorder.batch_losses) == 12
    assert ours.seen == theirs.seen
    assert ours.recorder.batch_losses == theirs.recorder.batch_losses
    assert ours.recorder.validations == theirs.recorder.validations
    for mine, real in zip(ours.model.parameters(), theirs.model.parameters()):
        assert torch.equal(mine, real)


@pytest.mark.parametrize("version", ["0.17.7-pytorch", "0.20.0-pytorch", "0.21.0-pytorch"])
def test_determineds_old_checkpoints_warm_start_like_determined(
    version: str, tmp_path: pathlib.Path
) -> None:
    path = pathlib.Path(shutil.copytree(ANCIENT / version, tmp_path / version))
    theirs = _warm(det_pytorch, path, "OneVarTrial")
    ours = _warm(dl_pytorch, path, "OneVarTrial")
    assert torch.equal(ours.model.weight, theirs.model.weight)
