"""Checkpoint storage that fails, and checkpoint files that try to run code.

Tests run as root, for whom permissions block nothing: an unwritable directory here is one
under a regular file, a full disk is a file-size limit (RLIMIT_FSIZE) or an injected ENOSPC.
"""

import doctest
import errno
import json
import os
import pathlib
import pickle
from typing import Any, Dict, List, Optional

import pytest
import torch

from det_lightning import errors, pytorch
from det_lightning.adapters import storage
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch import _checkpoint_write as ckpt_write
from tests.fixtures.trials import make_trials, seed_everything
from tests.integration.scripts.launch import Script

HPARAMS = {"n": 48, "batch_size": 8, "lr": 0.01}
MLPTrial = make_trials(pytorch)["MLPTrial"]


class Watched(MLPTrial):  # type: ignore[valid-type, misc]
    """MLPTrial whose callback records the checkpoint directory at each write and shutdown."""

    root: Optional[pathlib.Path] = None
    writes: List[Dict[str, Any]] = []
    shutdowns = 0

    def build_callbacks(self) -> Dict[str, Any]:
        cls = type(self)

        class Watch(pytorch.PyTorchCallback):
            def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
                assert cls.root is not None
                complete = complete_checkpoints(cls.root)
                assert pathlib.Path(checkpoint_dir).name in complete  # final and complete
                cls.writes.append({"writing": checkpoint_dir, "complete": complete})

            def on_trial_shutdown(self) -> None:
                cls.shutdowns += 1

        return {**super().build_callbacks(), "watch": Watch()}


def watched(root: pathlib.Path) -> Any:
    class Trial(Watched):
        pass

    Trial.root, Trial.writes, Trial.shutdowns = root, [], 0
    # The same trial class as MLPTrial's checkpoints name: a run of MLPTrial may resume them.
    Trial.__module__, Trial.__qualname__ = MLPTrial.__module__, MLPTrial.__qualname__
    return Trial


def fit(trial_cls: Any, checkpoint_dir: pathlib.Path, **kw: Any) -> Any:
    seed_everything(3)
    with pytorch.init(hparams=dict(HPARAMS), accelerator="cpu") as context:
        trial = trial_cls(context)
        trainer = pytorch.Trainer(trial, context, logger=False, checkpoint_dir=str(checkpoint_dir))
        kw.setdefault("max_length", pytorch.Batch(8))
        trainer.fit(**kw)
    return trial


def steps_of(checkpoint: pathlib.Path) -> int:
    return int(json.loads((checkpoint / ckpt.METADATA_FILE).read_text())["steps_completed"])


def complete_checkpoints(root: pathlib.Path) -> Dict[str, int]:
    return {
        p.name: steps_of(p)
        for p in root.iterdir()
        if ckpt.is_complete(p) and not p.name.startswith(".")
    }


def uuid_of(written: str) -> str:
    """The UUID of the checkpoint whose final directory ``on_checkpoint_write_end`` got."""
    return pathlib.Path(written).name


def partials(root: pathlib.Path) -> List[pathlib.Path]:
    return [p for p in root.iterdir() if p.name.endswith(ckpt.PARTIAL_SUFFIX)]


# ----- before training -------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["under a file", "is a file"])
def test_an_unwritable_checkpoint_dir_fails_before_any_batch(
    layout: str, tmp_path: pathlib.Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    root = blocker / "checkpoints" if layout == "under a file" else blocker
    trial_cls = watched(root)
    seed_everything(3)
    with pytorch.init(hparams=dict(HPARAMS), accelerator="cpu") as context:
        trial = trial_cls(context)
        trainer = pytorch.Trainer(trial, context, logger=False, checkpoint_dir=str(root))
        with pytest.raises(errors.CheckpointStorageError) as failed:
            trainer.fit(max_length=pytorch.Batch(4))
    message = str(failed.value)
    assert f"Cannot write checkpoints to {root}" in message
    assert ("NotADirectoryError" if layout == "under a file" else "FileExistsError") in message
    assert "Nothing was trained" in message
    assert trial.seen == [] and trial_cls.shutdowns == 0  # reported before training started
    assert blocker.read_text() == "not a directory"


def test_too_little_space_fails_before_any_batch(
    checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Usage:
        free = 100  # bytes: less than the MLP's weights

    monkeypatch.setattr(storage.shutil, "disk_usage", lambda path: Usage)
    trial_cls = watched(checkpoint_dir)
    with pytest.raises(errors.CheckpointStorageError, match="Not enough space for a checkpoint"):
        fit(trial_cls, checkpoint_dir)
    assert trial_cls.writes == [] and not complete_checkpoints(checkpoint_dir)


def test_the_space_verdict() -> None:
    assert doctest.testmod(storage).failed == 0
    root = pathlib.Path("/ckpt")
    assert storage.too_little_space(root, free=99, needed=100) is not None
    assert storage.too_little_space(root, free=250, needed=100) is None  # warns only
    assert storage.too_little_space(root, free=300, needed=100) is None


# ----- during training -------------------------------------------------------------------------
def test_a_full_disk_mid_run_names_the_path_and_keeps_the_previous_checkpoint(
    checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write_json = ckpt_write.write_json
    metadata_writes: List[pathlib.Path] = []

    def fills_up(path: pathlib.Path, content: Any) -> None:
        if path.name == ckpt.METADATA_FILE:
            metadata_writes.append(path)
            if len(metadata_writes) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_write_json(path, content)

    monkeypatch.setattr(ckpt_write, "write_json", fills_up)
    trial_cls = watched(checkpoint_dir)
    with pytest.raises(errors.CheckpointStorageError) as failed:
        fit(trial_cls, checkpoint_dir, checkpoint_period=pytorch.Batch(3), checkpoint_policy="best")
    message = str(failed.value)
    assert len(trial_cls.writes) == 1  # the second write failed before its write_end
    assert "No space left on device" in message and str(metadata_writes[1]) in message
    assert f"Writing checkpoint {checkpoint_dir}/" in message
    assert trial_cls.shutdowns == 1
    # The first checkpoint (batch 3) is whole and loadable; the failed one left nothing.
    assert list(complete_checkpoints(checkpoint_dir).values()) == [3]
    assert partials(checkpoint_dir) == []
    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert len(resumed.seen) == 5


def test_superseded_checkpoints_are_deleted_only_after_the_new_one_is_complete(
    checkpoint_dir: pathlib.Path,
) -> None:
    trial_cls = watched(checkpoint_dir)
    fit(
        trial_cls,
        checkpoint_dir,
        max_length=pytorch.Batch(24),
        checkpoint_period=pytorch.Batch(3),
        validation_period=pytorch.Batch(4),
        checkpoint_policy="best",
    )
    writes = trial_cls.writes
    assert len(writes) >= 4
    for before, during in zip(writes, writes[1:]):
        # Until checkpoint n+1 is complete, checkpoint n (the newest complete one before it) and
        # everything it kept are still there.
        kept_after_n = set(before["complete"]) | {uuid_of(before["writing"])}
        newest = max(kept_after_n, key=lambda uuid: during["complete"].get(uuid, -1))
        assert newest in during["complete"]
    final = complete_checkpoints(checkpoint_dir)
    assert len(final) <= 2 < len(writes)  # the policy did delete the superseded ones
    assert max(final.values()) == 24


@pytest.mark.slow
@pytest.mark.parametrize(
    "limit",
    [{"fsize_after": 1}, {"fsize_at_save": 2}],
    ids=["in-the-training-thread", "in-the-background"],
)
def test_a_real_write_failure_stops_the_run_with_the_path(
    limit: Dict[str, int], tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    script = Script(
        tmp_path / "run",
        batches=9,
        hparams=HPARAMS,
        fit={"checkpoint_period": 3},
        fsize_limit=2048,
        **limit,
    )
    assert script.wait() == 1
    log = script.log()
    assert "CheckpointStorageError: Writing checkpoint" in log
    assert str(checkpoint_dir) in log and "earlier complete checkpoints" in log
    assert "a test write there fails too" in log  # the probe, not only torch's wording, told
    assert list(complete_checkpoints(checkpoint_dir).values()) == [3]
    assert partials(checkpoint_dir) == []
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None
    pytorch.load_trial_from_checkpoint_path(str(latest), trial_class=MLPTrial)


# ----- checkpoint files that try to run code ---------------------------------------------------
class RunsCode:
    """Unpickling this creates ``marker``: proof that loading ran code."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (pathlib.Path.write_text, (self.marker, "code ran"))


@pytest.fixture
def a_checkpoint(checkpoint_dir: pathlib.Path) -> pathlib.Path:
    fit(MLPTrial, checkpoint_dir, max_length=pytorch.Batch(2))
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None
    return latest


def test_a_malicious_trial_state_pkl_is_refused(
    a_checkpoint: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    marker = tmp_path / "pwned"
    state = {"batches_trained": 2, "payload": RunsCode(marker)}
    (a_checkpoint / ckpt.TRIAL_STATE_FILE).write_bytes(pickle.dumps(state))
    with pytest.raises(errors.InvalidCheckpointException, match="only plain data is accepted"):
        fit(MLPTrial, a_checkpoint.parent, latest_checkpoint=str(a_checkpoint))
    assert not marker.exists()


@pytest.mark.parametrize("how", ["load_trial_from_checkpoint_path", "fit"])
def test_a_malicious_state_dict_pth_is_refused(
    how: str, a_checkpoint: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    marker = tmp_path / "pwned"
    state = torch.load(str(a_checkpoint / ckpt.STATE_DICT_FILE), weights_only=True)
    state["payload"] = RunsCode(marker)
    torch.save(state, str(a_checkpoint / ckpt.STATE_DICT_FILE))
    with pytest.raises(errors.InvalidCheckpointException, match="weights_only"):
        if how == "fit":
            fit(MLPTrial, a_checkpoint.parent, latest_checkpoint=str(a_checkpoint))
        else:
            pytorch.load_trial_from_checkpoint_path(str(a_checkpoint), trial_class=MLPTrial)
    assert not marker.exists()


def test_loading_without_a_trial_class_needs_consent(a_checkpoint: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="trust_code=True"):
        pytorch.load_trial_from_checkpoint_path(str(a_checkpoint))
