"""The lean callback dispatch (``adapters/hooks.py``) is invisible: a callback that overrides
every Lightning hook sees the same calls, arguments and loop state with it and without it, and
the run logs and trains the same."""

import inspect
import pathlib
from typing import Any, List, Tuple

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from det_lightning import pytorch
from det_lightning.adapters import hooks
from tests.fixtures.run import run_trial

HOOKS = sorted(name for name, member in vars(Callback).items()
               if callable(member) and (name.startswith("on_") or name in ("setup", "teardown")))


def _tracer() -> Any:
    events: List[Tuple[Any, ...]] = []

    def make(name: str) -> Any:
        def hook(self: Any, trainer: pl.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            loop = trainer.fit_loop.epoch_loop
            shown = [a for a in args if isinstance(a, (int, str))]
            events.append((name, tuple(shown), trainer.global_step,
                           loop.batch_progress.total.completed, trainer.should_stop,
                           pl_module._current_fx_name,
                           sorted(trainer.callback_metrics), sorted(trainer.progress_bar_metrics)))
        return hook

    tracer = type("Tracer", (Callback,), {name: make(name) for name in HOOKS})()
    return tracer, events


def _run(tmp_path: pathlib.Path, name: str) -> Any:
    tracer, events = _tracer()
    trainer_kwargs = {
        "callbacks": [tracer, EarlyStopping("validation_loss", patience=50),
                      ModelCheckpoint(dirpath=tmp_path / name / "lightning", monitor="validation_loss")],
        "logger": CSVLogger(tmp_path / name / "csv", name="", version=""),
        "checkpoint_dir": str(tmp_path / name / "det"),
    }
    trial, _ = run_trial(pytorch, "MLPTrial", {"lr": 0.01}, trainer_kwargs=trainer_kwargs,
                         max_length=pytorch.Batch(20), validation_period=pytorch.Batch(6),
                         checkpoint_period=pytorch.Batch(8), reporting_period=pytorch.Batch(5))
    return trial, events, (tmp_path / name / "csv" / "metrics.csv").read_text()


def test_every_hook_sees_the_same_with_and_without_the_lean_dispatch(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert hooks.enabled()  # the installed Lightning is one the lean dispatch covers
    lean_trial, lean_events, lean_csv = _run(tmp_path, "lean")
    monkeypatch.setenv(hooks.LEAN_HOOKS_ENV, "0")
    plain_trial, plain_events, plain_csv = _run(tmp_path, "plain")
    assert len(lean_events) > 100
    assert lean_events == plain_events
    assert lean_csv == plain_csv
    assert lean_trial.seen == plain_trial.seen
    for a, b in zip(lean_trial.model.parameters(), plain_trial.model.parameters()):
        assert torch.equal(a, b)


def test_lightning_still_dispatches_through_the_replaced_function() -> None:
    """Contract: Lightning's loops call ``call._call_callback_hooks`` by module attribute, with
    the signature the lean dispatch takes; if Lightning changes either, this fails."""
    from lightning.pytorch.loops import evaluation_loop, fit_loop, training_epoch_loop
    from lightning.pytorch.trainer import call

    for module in (training_epoch_loop, fit_loop, evaluation_loop):
        assert "call._call_callback_hooks(" in inspect.getsource(module)
    parameters = inspect.signature(hooks._lightning_dispatch).parameters
    assert list(parameters) == ["trainer", "hook_name", "args", "monitoring_callbacks", "kwargs"]
    assert call._call_callback_hooks in (hooks._lightning_dispatch, hooks._lean_dispatch)
