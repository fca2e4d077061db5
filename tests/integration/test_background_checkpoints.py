"""Checkpoints written in the background: training goes on during the write, everything that
needs the checkpoint waits for it, a failed write fails the run, and the files are the ones the
synchronous path writes.

The write is held with a ``Gate`` object in a callback's state: pickling it (which happens in the
writer, inside ``torch.save``) waits for an event the training thread sets later. A write in
the training thread would wait for itself; so would a training loop that waits for the write.
"""

import io
import json
import os
import pathlib
import sys
import threading
import traceback
import zipfile
from typing import Any, Callable, Dict, List, Optional

import pytest
import torch

from det_lightning import pytorch
from det_lightning.pytorch import _background
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint import DELETING_SUFFIX, PARTIAL_SUFFIX
from tests.fixtures.trials import make_trials, seed_everything

MLPTrial: Any = make_trials(pytorch)["MLPTrial"]
HPARAMS = {"lr": 0.01}
# seconds: only a broken implementation (a deadlock) ever reaches it
DEADLINE = float(os.environ.get("GATE_DEADLINE", 120))
WRITER = "det-lightning-checkpoint-write"


class Boom(Exception):
    """What the failing write raises (a class of its own: the run must fail with it)."""


class Gate:
    """Pickles as 0, after ``before()``; copying it (the snapshot) keeps this very object."""

    def __init__(self, before: Callable[[], None] = lambda: None) -> None:
        self.before = before
        self.threads: List[str] = []

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Gate":
        return self

    def __reduce__(self) -> Any:
        self.threads.append(threading.current_thread().name)
        self.before()
        return (int, (0,))


class GateCallback(pytorch.PyTorchCallback):
    """Puts ``gates[n]`` into the state of the n-th checkpoint (0-based), a plain 0 otherwise;
    records the complete checkpoints under ``root`` at each validation's report."""

    def __init__(self, gates: Dict[int, Gate], root: Optional[pathlib.Path] = None) -> None:
        self.gates = gates
        self.root = root
        self.saves = 0
        self.at_reports: List[List[int]] = []

    def state_dict(self) -> Dict[str, Any]:
        gate = self.gates.get(self.saves, 0)
        self.saves += 1
        return {"gate": gate}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        pass

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        if self.root is not None:
            self.at_reports.append(sorted(complete(self.root)))


class GatedTrial(MLPTrial):  # type: ignore[misc, valid-type]
    """MLPTrial whose ``on_batch`` runs before each batch; callbacks from ``callbacks``."""

    callbacks: Dict[str, Any] = {}
    on_batch: Callable[[int], None] = staticmethod(lambda batch_idx: None)

    def build_callbacks(self) -> Dict[str, Any]:
        return dict(self.callbacks)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        type(self).on_batch(batch_idx)
        return super().train_batch(batch, epoch_idx, batch_idx)


def wait(event: threading.Event, what: str) -> None:
    if not event.wait(DEADLINE):
        main = sys._current_frames()[threading.main_thread().ident or 0]
        raise RuntimeError(
            f"never happened: {what} (did something wait for the write?); the training thread "
            f"was at:\n{''.join(traceback.format_stack(main))}"
        )


def fit(
    root: pathlib.Path,
    callbacks: Dict[str, Any],
    on_batch: Callable[[int], None] = lambda batch_idx: None,
    trainer_kwargs: Optional[Dict[str, Any]] = None,
    exp_conf: Optional[Dict] = None,
    **fit_kwargs: Any,
) -> Any:
    class Trial(GatedTrial):
        pass

    Trial.callbacks, Trial.on_batch = callbacks, staticmethod(on_batch)
    seed_everything(3)
    with pytorch.init(hparams=dict(HPARAMS), accelerator="cpu", exp_conf=exp_conf) as context:
        trial = Trial(context)
        trainer = pytorch.Trainer(
            trial, context, logger=False, checkpoint_dir=str(root), **(trainer_kwargs or {})
        )
        trainer.fit(**{"checkpoint_policy": "none", **fit_kwargs})
    return trial, trainer


def complete(root: pathlib.Path) -> Dict[int, pathlib.Path]:
    """The complete checkpoints under ``root`` by ``steps_completed``."""
    return {
        json.loads((p / ckpt.METADATA_FILE).read_text())["steps_completed"]: p
        for p in root.iterdir()
        if not p.name.startswith(".")
    }


def writer_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WRITER]


# ----- training goes on -----------------------------------------------------------------------
def test_training_goes_on_during_the_write_and_the_checkpoint_has_the_weights_of_its_batch(
    tmp_path: pathlib.Path,
) -> None:
    trained_on = threading.Event()
    gate = Gate(lambda: wait(trained_on, "batch 3 trained while checkpoint 2 was written"))
    weights: Dict[str, torch.Tensor] = {}
    trials: List[Any] = []

    class Trial(GatedTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            trials.append(self)

    def on_batch(batch_idx: int) -> None:
        if batch_idx == 2:  # the checkpoint of batch 2 was taken just before
            weights.update({k: v.clone() for k, v in trials[0].model.state_dict().items()})
        if batch_idx == 3:  # the batch before checkpoint 4, which waits for the write of 2
            trained_on.set()

    Trial.callbacks, Trial.on_batch = {"gate": GateCallback({0: gate})}, staticmethod(on_batch)
    seed_everything(3)
    root = tmp_path / "checkpoints"
    with pytorch.init(hparams=dict(HPARAMS), accelerator="cpu") as context:
        trainer = pytorch.Trainer(Trial(context), context, logger=False, checkpoint_dir=str(root))
        trainer.fit(
            max_length=pytorch.Batch(8),
            checkpoint_period=pytorch.Batch(2),
            checkpoint_policy="none",
        )
    assert gate.threads == [WRITER]  # pickled by the writer thread, not the training thread
    saved = torch.load(complete(root)[2] / ckpt.STATE_DICT_FILE, weights_only=False)  # the gate
    model_state = saved[ckpt.MODELS][0]
    assert weights.keys() == model_state.keys()
    for name, value in weights.items():  # batches 2 and 3 trained meanwhile, on other memory
        assert torch.equal(model_state[name], value), name
    assert not writer_threads()  # joined by fit()'s end


def test_sync_checkpoints_switch_writes_in_the_training_thread(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for how in ("argument", "environment"):
        gate = Gate()
        kwargs: Dict[str, Any] = {}
        if how == "argument":
            kwargs["sync_checkpoints"] = True
        else:
            monkeypatch.setenv(_background.SYNC_CHECKPOINTS_ENV, "1")
        fit(
            tmp_path / how,
            {"gate": GateCallback({0: gate})},
            trainer_kwargs=kwargs,
            max_length=pytorch.Batch(4),
            checkpoint_period=pytorch.Batch(2),
        )
        assert gate.threads == [threading.main_thread().name], how
        assert sorted(complete(tmp_path / how)) == [2, 4]


def test_a_bad_sync_checkpoints_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_background.SYNC_CHECKPOINTS_ENV, "maybe")
    with pytest.raises(ValueError, match="DET_LIGHTNING_SYNC_CHECKPOINTS='maybe': expected 1"):
        _background.sync_checkpoints(None)
    with pytest.raises(TypeError, match=r"Trainer\(sync_checkpoints='yes'\)"):
        _background.sync_checkpoints("yes")  # type: ignore[arg-type]


# ----- what waits for the write ---------------------------------------------------------------
def test_the_next_checkpoint_and_retention_wait_for_the_write(tmp_path: pathlib.Path) -> None:
    """Retention keeps one checkpoint: the superseded one is deleted only once its successor
    is complete, so at every moment one complete checkpoint exists."""
    root = tmp_path / "checkpoints"
    seen_during_write: List[List[int]] = []
    trained_on = threading.Event()

    def during_write() -> None:
        seen_during_write.append(sorted(complete(root)))
        wait(trained_on, "batch 5 trained while checkpoint 4 was written")

    callbacks = {"gate": GateCallback({1: Gate(during_write)})}
    fit(
        root,
        callbacks,
        on_batch=lambda i: trained_on.set() if i == 5 else None,
        exp_conf={"checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0}},
        max_length=pytorch.Batch(8),
        checkpoint_period=pytorch.Batch(2),
    )
    assert seen_during_write == [[2]]  # checkpoint 2 still there while 4 was being written
    assert sorted(complete(root)) == [8]
    assert not [p for p in root.iterdir() if p.name.endswith((PARTIAL_SUFFIX, DELETING_SUFFIX))]


def test_a_validation_is_reported_after_the_checkpoint_before_it_is_complete(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "checkpoints"
    validating = threading.Event()

    class Validating(pytorch.PyTorchCallback):
        def on_validation_start(self) -> None:
            validating.set()

    gates = GateCallback({0: Gate(lambda: wait(validating, "a validation started"))}, root)
    fit(
        root,
        {"gate": gates, "validating": Validating()},
        max_length=pytorch.Batch(3),
        checkpoint_period=pytorch.Batch(2),
        validation_period=pytorch.Batch(3),
    )
    assert gates.at_reports == [[2]]  # reported at batch 3, checkpoint 2 complete by then


def test_a_callback_on_the_write_hooks_gets_them_where_determined_calls_them(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Determined calls on_checkpoint_write_end right after the write, before the next batch:
    with such a callback every write happens in the training thread."""
    root = tmp_path / "checkpoints"
    batches: List[int] = []

    class WriteEnd(pytorch.PyTorchCallback):
        def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
            batches.append(len(trained))
            assert (pathlib.Path(checkpoint_dir) / ckpt.METADATA_FILE).exists()

    trained: List[int] = []
    gate = Gate()
    with caplog.at_level("INFO"):
        fit(
            root,
            {"gate": GateCallback({0: gate}), "write_end": WriteEnd()},
            on_batch=trained.append,
            max_length=pytorch.Batch(4),
            checkpoint_period=pytorch.Batch(2),
        )
    assert gate.threads == [threading.main_thread().name]
    assert batches == [2, 4]
    assert "write_end.on_checkpoint_write_end runs right after each write" in caplog.text


def test_an_error_in_training_waits_for_the_write_in_flight(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "checkpoints"
    failing = threading.Event()

    def on_batch(batch_idx: int) -> None:
        if batch_idx == 3:
            failing.set()
            raise Boom("training failed")

    gate = Gate(lambda: wait(failing, "the training error"))
    with pytest.raises(Boom, match="training failed"):
        fit(
            root,
            {"gate": GateCallback({0: gate})},
            on_batch=on_batch,
            max_length=pytorch.Batch(8),
            checkpoint_period=pytorch.Batch(2),
        )
    assert not writer_threads()
    assert sorted(complete(root)) == [2]  # finished, not cut off
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


# ----- a failed write -------------------------------------------------------------------------
def failing_gate() -> Gate:
    def fail() -> None:
        raise Boom("disk on fire")

    return Gate(fail)


@pytest.mark.parametrize("which", [1, 3])  # one in the middle; the last (noticed at the end)
def test_a_failed_background_write_fails_the_run_with_its_error_and_leaves_nothing(
    which: int, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "checkpoints"
    gates = GateCallback({which: failing_gate()})
    with pytest.raises(Boom, match="disk on fire"):
        fit(root, {"gate": gates}, max_length=pytorch.Batch(8), checkpoint_period=pytorch.Batch(2))
    assert sorted(complete(root)) == [2, 4, 6][:which]
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []
    assert not writer_threads()


# ----- the same files -------------------------------------------------------------------------
def archive_records(path: pathlib.Path) -> Dict[str, bytes]:
    """The records of a ``torch.save`` file, less the id torch makes up for every save."""
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as archive:
        return {
            name: archive.read(name)
            for name in archive.namelist()
            if not name.endswith("serialization_id")
        }


def test_the_background_files_are_the_synchronous_files(tmp_path: pathlib.Path) -> None:
    roots = {}
    for sync in (True, False):
        roots[sync] = tmp_path / f"sync-{sync}"
        fit(
            roots[sync],
            {},
            trainer_kwargs={"sync_checkpoints": sync},
            max_length=pytorch.Batch(6),
            checkpoint_period=pytorch.Batch(2),
            validation_period=pytorch.Batch(3),
        )
    sync, background = complete(roots[True]), complete(roots[False])
    assert sorted(sync) == sorted(background) == [2, 4, 6]
    for steps, mine in background.items():
        theirs = sync[steps]
        assert archive_records(mine / ckpt.STATE_DICT_FILE) == archive_records(
            theirs / ckpt.STATE_DICT_FILE
        )
        for name in (ckpt.TRIAL_STATE_FILE, ckpt.LOAD_DATA_FILE):
            assert (mine / name).read_bytes() == (theirs / name).read_bytes(), name
        meta = [json.loads((d / ckpt.METADATA_FILE).read_text()) for d in (mine, theirs)]
        for m in meta:
            m.pop("det_lightning_run")  # each run's own id
        assert meta[0] == meta[1]
        files = [
            sorted(str(p.relative_to(d)) for p in (d / ckpt.CODE_DIR).rglob("*"))
            for d in (mine, theirs)
        ]
        assert files[0] == files[1] and files[0]
