"""The lean callback dispatch (``adapters/lightning/hooks.py``) is invisible: a callback that overrides
every Lightning hook sees the same calls, arguments and loop state with it and without it, and
the run logs and trains the same."""

import inspect
import pathlib
import re
from typing import Any, List, Tuple

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.trainer.connectors.logger_connector.logger_connector import _LoggerConnector
from lightning.pytorch.utilities.combined_loader import _MaxSizeCycle

from det_lightning import pytorch
from det_lightning.adapters.lightning import hooks, lean, lean_validation, versions
from det_lightning.adapters.lightning.lean_validation import LeanEvaluationLoop
from det_lightning.adapters.module import TrialModule
from tests.fixtures.run import run_trial

HOOKS = sorted(
    name
    for name, member in vars(Callback).items()
    if callable(member) and (name.startswith("on_") or name in ("setup", "teardown"))
)


def _state(trainer: pl.Trainer, pl_module: Any) -> Tuple[Any, ...]:
    """Everything a callback can read of the loop, at one hook call."""
    loop = trainer.fit_loop.epoch_loop
    progress = loop.batch_progress
    steps = loop.manual_optimization.optim_step_progress
    connector = trainer._logger_connector
    # The connector's caches first: the public properties below refresh them as they are read.
    cached = (
        _values(connector._callback_metrics),
        _values(connector._progress_bar_metrics),
        _values(connector._logged_metrics),
    )
    # the training fetch's counters (the lean advance inlines the fetcher's and the combined
    # loader's next() for one loader)
    fetcher: Any = trainer.fit_loop._data_fetcher
    cycle = getattr(getattr(fetcher, "_combined_loader", None), "_iterator", None)
    return (
        *cached,
        trainer.global_step,
        loop._batches_that_stepped,
        trainer.current_epoch,
        str(progress.total),
        str(progress.current),
        progress.is_last_batch,
        str(steps.total),
        trainer.should_stop,
        pl_module._current_fx_name,
        trainer.training,
        trainer.validating,
        # what the lean validation step's copy of on_batch_start sets (decides on_step metrics)
        connector._first_loop_iter,
        None if fetcher is None else (fetcher.fetched, fetcher.done, fetcher.length),
        None if cycle is None else (cycle._idx, list(getattr(cycle, "_consumed", []))),
        _values(trainer.callback_metrics),
        _values(trainer.progress_bar_metrics),
        _values(trainer.logged_metrics),
    )


def _values(metrics: Any) -> List[Tuple[str, Any]]:
    return sorted((k, v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in metrics.items())


def _tracer() -> Any:
    events: List[Tuple[Any, ...]] = []

    def make(name: str) -> Any:
        def hook(self: Any, trainer: pl.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            shown = [a for a in args if isinstance(a, (int, str))]
            events.append((name, tuple(shown), *_state(trainer, pl_module)))
            if name == "on_train_batch_end" and args[-1] % 7 == 3:
                # A Lightning callback logging now and then, on step and to the loggers.
                pl_module.log("traced", float(args[-1]), on_step=True, prog_bar=True)
            if name == "on_validation_batch_end" and args[-1] == 1 and trainer.current_epoch:
                # ... and in a validation pass, from its second batch on (from the second
                # epoch: the lean step's quiet first passes are traced as well)
                pl_module.log("traced_val", float(args[-1]), on_step=True, prog_bar=True)

        return hook

    tracer = type("Tracer", (Callback,), {name: make(name) for name in HOOKS})()
    return tracer, events


def _run(tmp_path: pathlib.Path, name: str) -> Any:
    tracer, events = _tracer()
    trainer_kwargs = {
        "callbacks": [
            tracer,
            EarlyStopping("validation_loss", patience=50),
            ModelCheckpoint(dirpath=tmp_path / name / "lightning", monitor="validation_loss"),
        ],
        "logger": CSVLogger(tmp_path / name / "csv", name="", version=""),
        "checkpoint_dir": str(tmp_path / name / "det"),
        "log_every_n_steps": 4,
    }
    trial, _ = run_trial(
        pytorch,
        "MLPTrial",
        {"lr": 0.01},
        trainer_kwargs=trainer_kwargs,
        max_length=pytorch.Batch(20),
        validation_period=pytorch.Batch(6),
        checkpoint_period=pytorch.Batch(8),
        reporting_period=pytorch.Batch(5),
    )
    return trial, events, (tmp_path / name / "csv" / "metrics.csv").read_text()


def _compare_lean_and_plain(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """Runs the traced fit with the lean pieces, then with Lightning's own code, and requires
    every traced hook call, the CSV log and the weights equal; returns the lean run's events."""
    # the installed Lightning has a row in the table
    assert hooks.enabled() and lean.enabled() and lean_validation.enabled()
    trainers: List[pl.Trainer] = []
    original = lean.install
    monkeypatch.setattr(
        lean, "install", lambda trainer: (original(trainer), trainers.append(trainer))
    )
    step_metric_updates: List[str] = []  # the validation's per-batch metric bookkeeping
    update = _LoggerConnector.update_eval_step_metrics
    monkeypatch.setattr(
        _LoggerConnector,
        "update_eval_step_metrics",
        lambda self, step: (
            step_metric_updates.append(
                trainers[-1].fit_loop.epoch_loop.val_loop.__class__.__name__
            ),
            update(self, step),
        ),
    )
    # What Lightning asks between two batches and the lean loop settles once per epoch.
    between: List[str] = []
    accumulate = _TrainingEpochLoop._should_accumulate
    monkeypatch.setattr(
        _TrainingEpochLoop,
        "_should_accumulate",
        lambda self: (between.append(type(self).__name__), accumulate(self))[1],
    )
    # The training fetch: Lightning's four levels of next(), or the lean advance's one.
    fetches: List[int] = []
    cycle_next = _MaxSizeCycle.__next__
    monkeypatch.setattr(
        _MaxSizeCycle, "__next__", lambda self: (fetches.append(1), cycle_next(self))[1]
    )
    lean_trial, lean_events, lean_csv = _run(tmp_path, "lean")
    assert between == []  # the lean done, on_advance_end and step metrics ran
    assert fetches == []  # every training batch fetched inline
    monkeypatch.setenv(lean.LEAN_ENV, "0")
    plain_trial, plain_events, plain_csv = _run(tmp_path, "plain")
    assert between.count(_TrainingEpochLoop.__name__) >= 3 * 20  # three per batch
    assert len(fetches) >= 20
    # The lean step skips it while nothing was logged in the pass, Lightning's never does.
    lean_updates = step_metric_updates.count(LeanEvaluationLoop.__name__)
    assert 0 < lean_updates < step_metric_updates.count(_EvaluationLoop.__name__)
    assert [
        (type(t.fit_loop.epoch_loop), type(t.fit_loop.epoch_loop.val_loop)) for t in trainers
    ] == [(lean.LeanTrainingEpochLoop, LeanEvaluationLoop), (_TrainingEpochLoop, _EvaluationLoop)]
    for lean_event, plain_event in zip(lean_events, plain_events):
        assert lean_event == plain_event
    assert len(lean_events) == len(plain_events)
    assert lean_csv == plain_csv
    assert lean_trial.seen == plain_trial.seen
    for a, b in zip(lean_trial.model.parameters(), plain_trial.model.parameters()):
        assert torch.equal(a, b)
    return lean_events


def test_every_hook_sees_the_same_with_and_without_the_lean_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean hook dispatch (hooks.py) and the lean loop, backward and step (lean.py) against
    Lightning's own code: the same hook calls, arguments, loop counters, logged and progress-bar
    metrics at every call, the same CSV log and the same weights."""
    lean_events = _compare_lean_and_plain(tmp_path, monkeypatch)
    assert len(lean_events) > 100
    assert any(e[0] == "on_before_optimizer_step" for e in lean_events)
    assert any(("traced", 3.0) in e[-2] for e in lean_events)  # the logged value is traced
    assert any(("traced_val_step", 1.0) in e[-1] for e in lean_events)  # and in validation


def test_a_batch_the_module_skips_ends_the_epoch_as_lightning_does(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_train_batch_start`` returning -1 ends the epoch; the release's row of
    ``versions.TABLE`` says whether Lightning marks that batch the last one first (2.6.0 on),
    and the lean advance must leave the loop as Lightning's own does on every release."""
    skipped: List[int] = []

    def on_train_batch_start(self: Any, batch: Any, batch_idx: int) -> Any:
        if batch_idx == 4:
            skipped.append(batch_idx)
            return -1
        return None

    monkeypatch.setattr(TrialModule, "on_train_batch_start", on_train_batch_start, raising=False)
    lean_events = _compare_lean_and_plain(tmp_path, monkeypatch)
    assert skipped and len(skipped) % 2 == 0  # as often in the lean run as in the plain one
    # The epochs a skip ended: one batch processed but never completed (progress.current).
    skip_ends = [
        e
        for e in lean_events
        if e[0] == "on_train_epoch_end"
        and re.search(r"completed=(\d+)", e[9])[1] != re.search(r"processed=(\d+)", e[9])[1]
    ]
    assert len(skip_ends) > 1
    # progress.is_last_batch there: marked by Lightning from 2.6.0 (see _state for the indices)
    assert {e[10] for e in skip_ends} == {versions.SHAPE.marks_last_batch}


def test_a_release_without_a_row_runs_lightnings_own_loop_and_says_so_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Lightning newer than ``versions.TABLE``: Lightning's loop and dispatch, one warning
    naming the cost, the same training as the lean path gives."""
    monkeypatch.setattr(versions, "SHAPE", None)
    monkeypatch.setattr(versions, "_warned", False)
    trainers: List[pl.Trainer] = []
    original = lean.install
    monkeypatch.setattr(
        lean, "install", lambda trainer: (original(trainer), trainers.append(trainer))
    )
    with pytest.warns(UserWarning, match="1.5x the instructions") as warned:
        _, events, csv = _run(tmp_path, "uncovered")
    assert len([w for w in warned if "1.5x" in str(w.message)]) == 1
    assert [type(t.fit_loop.epoch_loop) for t in trainers] == [_TrainingEpochLoop]
    assert not hasattr(trainers[0], hooks._PLAN)  # Lightning's own callback dispatch
    assert len(events) > 100 and "traced" in csv


def test_a_step_that_requires_dataloader_idx_fails_as_in_lightning_also_after_a_pass(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean loop checks the step's signature once per hooks it has not seen pass: a
    ``validation_step`` that requires ``dataloader_idx`` with one dataloader fails with
    Lightning's error, also when it appears after passes that were fine."""
    passes: List[str] = []

    def on_validation_start(self: Any) -> None:
        passes.append("pass")

    def on_validation_end(self: Any) -> None:
        if len(passes) == 2:  # from the third pass on: a step that requires dataloader_idx
            vars(self)["validation_step"] = lambda batch, batch_idx, dataloader_idx: None

    monkeypatch.setattr(TrialModule, "on_validation_start", on_validation_start, raising=False)
    monkeypatch.setattr(TrialModule, "on_validation_end", on_validation_end, raising=False)
    errors = []
    for lean_on in ("1", "0"):
        monkeypatch.setenv(lean.LEAN_ENV, lean_on)
        passes.clear()
        with pytest.raises(RuntimeError, match="dataloader_idx") as raised:
            run_trial(
                pytorch,
                "MLPTrial",
                {"lr": 0.01},
                trainer_kwargs={"checkpoint_dir": str(tmp_path / lean_on)},
                max_length=pytorch.Batch(20),
                validation_period=pytorch.Batch(5),
            )
        errors.append((str(raised.value), len(passes)))
    assert errors[0] == errors[1] and errors[0][1] == 2  # the third pass failed as it began


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


def test_callbacks_added_or_replaced_mid_fit_are_dispatched_as_lightning_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lean dispatch works out once which callbacks override each hook; a callback list
    changed during the fit (one appended in place, then the list replaced) is worked out again,
    so the new callbacks see the same hook calls as under Lightning's own dispatch."""

    def run() -> List[Tuple[str, str, int]]:
        seen: List[Tuple[str, str, int]] = []

        class Seer(Callback):
            def __init__(self, name: str) -> None:
                self.name = name

            def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
                seen.append((self.name, "on_train_batch_end", args[-1]))

            def on_before_optimizer_step(self, trainer: Any, *args: Any) -> None:
                seen.append((self.name, "on_before_optimizer_step", trainer.global_step))

        class Changer(Callback):
            def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
                batch_idx = args[-1]
                if batch_idx == 2:
                    trainer.callbacks.append(Seer("appended"))
                if batch_idx == 5:
                    trainer.callbacks = [cb for cb in trainer.callbacks if cb is not self] + [
                        Seer("replaced")
                    ]

        run_trial(
            pytorch,
            "MLPTrial",
            {"lr": 0.01},
            trainer_kwargs={"callbacks": [Changer()], "logger": False},
            max_length=pytorch.Batch(8),
        )
        return seen

    lean_seen = run()
    monkeypatch.setenv(lean.LEAN_ENV, "0")
    plain_seen = run()
    assert lean_seen == plain_seen
    assert ("appended", "on_train_batch_end", 2) in lean_seen
    assert ("replaced", "on_train_batch_end", 5) in lean_seen
    assert ("replaced", "on_before_optimizer_step", 7) in lean_seen


def test_the_pass_hooks_a_module_or_strategy_overrides_run_as_in_lightning(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean loop calls a pass's start and end hooks on the module and the strategy only
    where they override them: overridden ones run in Lightning's order, with the same
    ``_current_fx_name`` and loop state, beside the traced callbacks."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    calls: List[Tuple[Any, ...]] = []
    stages = ("model_eval", "start", "epoch_start", "epoch_end", "end")
    for owner, names in (
        (TrialModule, [f"on_validation_{stage}" for stage in stages]),
        (SingleDeviceStrategy, ["on_validation_start", "on_validation_end"]),
    ):
        for name in names:
            base = getattr(owner, name)

            def hook(self: Any, *args: Any, _name: str = name, _base: Any = base) -> Any:
                module = self if isinstance(self, pl.LightningModule) else self.lightning_module
                trainer = module.trainer
                calls.append((type(self).__name__, _name, *_state(trainer, module)))
                return _base(self, *args)

            monkeypatch.setattr(owner, name, hook)
    _compare_lean_and_plain(tmp_path, monkeypatch)
    half = len(calls) // 2
    assert half > 20 and calls[:half] == calls[half:]
    assert {c[1] for c in calls} == {f"on_validation_{stage}" for stage in stages}


def test_lightning_gets_its_own_dispatch_back_when_the_fit_ends() -> None:
    """The lean dispatch is in Lightning's ``call`` module only while a fit uses it; after the
    fit (also one that raised) Lightning's own function is back, and another fit installs it
    again."""
    from lightning.pytorch.trainer import call

    during: List[Any] = []

    class Look(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            during.append(call._call_callback_hooks)

    class Boom(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            raise RuntimeError("boom in a callback")

    def fit_with(callback: Callback) -> None:
        run_trial(
            pytorch,
            "MLPTrial",
            {"lr": 0.01},
            trainer_kwargs={"callbacks": [callback], "logger": False},
            max_length=pytorch.Batch(2),
        )

    for _ in range(2):
        fit_with(Look())
        assert call._call_callback_hooks is hooks._lightning_dispatch
    assert during and all(f is hooks._lean_dispatch for f in during), during
    with pytest.raises(RuntimeError, match="boom in a callback"):
        fit_with(Boom())
    assert call._call_callback_hooks is hooks._lightning_dispatch


def test_a_trainer_that_fails_to_build_gives_lightning_its_dispatch_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure after the lean dispatch was installed, while the trainer is still being built
    (no fit runs to release it), leaves Lightning's own dispatch in place."""
    from lightning.pytorch.trainer import call

    from det_lightning.adapters.lightning import lean_validation

    def fail(trainer: Any) -> None:
        assert call._call_callback_hooks is hooks._lean_dispatch  # it had been installed
        raise RuntimeError("boom while building")

    monkeypatch.setattr(lean_validation, "install", fail)
    with pytest.raises(RuntimeError, match="boom while building"):
        run_trial(pytorch, "MLPTrial", {"lr": 0.01}, max_length=pytorch.Batch(2))
    assert call._call_callback_hooks is hooks._lightning_dispatch
