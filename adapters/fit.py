"""``run_fit``: one ``det_lightning.pytorch.Trainer.fit()`` call, on a ``lightning.Trainer``.

Order, as Determined's controller does it::

    callbacks = trial.build_callbacks()
    on_trial_startup(first_batch_idx, latest_checkpoint)
    build the loaders; create the training iterator      # its random draw precedes the restore
    [restore the checkpoint: on_checkpoint_load_start, weights, optimizers, RNG, ...]
    lightning.Trainer(...).fit(TrialModule)              # ScheduleCallback drives the periods
    on_trial_shutdown()                                  # always

The steps, each a function below, hand on frozen values: ``_Fit`` (what every step reads,
made by ``_prepare``), ``_Model`` (the module and its data, ``_model``), ``_Loop`` (what drives
Lightning's loop, ``_loop``). The ``lightning.Trainer`` itself is built in
``lightning_trainer.py``; the trial is checked in ``trial_checks.py``.
"""

import contextlib
import dataclasses
import logging
import pathlib
import time
import warnings
from typing import Any, Callable, Iterator, Optional, Tuple

import lightning.pytorch as pl

from det_lightning.adapters import preemption
from det_lightning.adapters.callbacks import TrialHooks
from det_lightning.adapters.checkpoints import CheckpointManager
from det_lightning.adapters.data import (
    HooksFirst,
    TrainingData,
    build_training_data,
    build_validation_loader,
)
from det_lightning.adapters.lightning import hooks
from det_lightning.adapters.lightning_trainer import align_progress, lightning_trainer
from det_lightning.adapters.module import TrialModule, TrialSetup
from det_lightning.adapters.reporting import closing_summary
from det_lightning.adapters.resume import (
    ResumePlan,
    apply_state,
    identity_of,
    plan_resume,
    restore_lightning_callbacks,
)
from det_lightning.adapters.schedule import ScheduleCallback
from det_lightning.adapters.storage import check_checkpoint_dir
from det_lightning.adapters.trial_checks import build_callbacks, check_trial
from det_lightning.adapters.trial_state import TrialProgress
from det_lightning.pytorch._background import sync_checkpoints
from det_lightning.pytorch._boundaries import Schedule
from det_lightning.pytorch._checkpoint_policy import CheckpointPolicy
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._dispatch import Dispatcher
from det_lightning.pytorch._result import FitArgs, FitResult, TrainerOptions
from det_lightning.pytorch._store import CheckpointStore
from det_lightning.pytorch._trial import PyTorchTrial

logger = logging.getLogger("det_lightning.pytorch")


@dataclasses.dataclass(frozen=True)
class _Fit:
    """What every step of one fit reads.

    Attributes:
        args: ``fit()``'s arguments, ``latest_checkpoint`` resolved (``ResumePlan.name``).
        plan: where the fit starts.
        root: where checkpoints go: a directory or a URL (``_store.CheckpointStore``).
        hooks: the trial's ``build_callbacks()``, the fit's one ``Dispatcher`` (the module
            calls its hooks through it too).
    """

    trial: PyTorchTrial
    context: PyTorchTrialContext
    args: FitArgs
    options: TrainerOptions
    plan: ResumePlan
    root: CheckpointStore
    hooks: Dispatcher


@dataclasses.dataclass(frozen=True)
class _Model:
    """The module and its data, built before the restore (Determined's order).

    Attributes:
        start_batch: the batch training starts at.
    """

    module: TrialModule
    data: TrainingData
    val_loader: Any
    start_batch: int


@dataclasses.dataclass(frozen=True)
class _Loop:
    """What drives Lightning's loop, built after the restore: the periods, the checkpoint
    writes, the trial's hooks, the ranks' agreement to stop, and the callback that acts."""

    schedule: Schedule
    manager: CheckpointManager
    trial_hooks: TrialHooks
    stops: preemption.StopAgreement
    schedule_cb: ScheduleCallback


@contextlib.contextmanager
def _shutdown_after(det_hooks: Dispatcher) -> Iterator[None]:
    try:
        yield
    finally:
        det_hooks.on_trial_shutdown()


def run_fit(
    trial: PyTorchTrial, context: PyTorchTrialContext, args: FitArgs, options: TrainerOptions
) -> Tuple[FitResult, pl.Trainer]:
    """Trains ``trial`` per ``fit()``'s ``args`` with the Trainer's ``options``; returns what
    it did, and the ``lightning.Trainer`` that ran it."""
    started = time.monotonic()
    check_trial(trial, context)
    det_hooks = Dispatcher(build_callbacks(trial))
    fit = _prepare(trial, context, args, options, det_hooks=det_hooks)
    signals = preemption.SignalWatcher(context.distributed)
    with signals:  # SIGTERM/SIGINT: checkpoint after this batch, then TrialPreempted
        det_hooks.on_trial_startup(fit.plan.first_batch, fit.args.latest_checkpoint)
        with _shutdown_after(det_hooks):
            result, trainer = _train(fit, signals)
    result = dataclasses.replace(result, seconds=time.monotonic() - started)
    _conclude(fit, result, signals)
    return result, trainer


def _prepare(
    trial: PyTorchTrial,
    context: PyTorchTrialContext,
    args: FitArgs,
    options: TrainerOptions,
    *,
    det_hooks: Dispatcher,
) -> _Fit:
    """Checks where checkpoints go, plans the resume, and (on the chief) finishes the
    deletions an earlier run began."""
    root = options.checkpoint_dir  # a directory or a URL (_store.CheckpointStore)
    check_checkpoint_dir(root, context.distributed, context.models)
    plan = plan_resume(args.latest_checkpoint, root, identity_of(trial, context))
    args = dataclasses.replace(args, latest_checkpoint=plan.name)
    context.engine.steps_completed = plan.first_batch
    if context.distributed.rank == 0:
        spare = plan.path.name if plan.path is not None else None  # what this run resumes
        for leftover in root.sweep(spare):
            logger.info(f"Finished deleting {leftover}, which an earlier run had begun to delete.")
        logger.info(
            f"checkpoints go to {root}; TensorBoard files to {options.tensorboard_dir}"
            + (f"; resuming from {plan.path} at batch {plan.first_batch}" if plan.path else "")
        )
    return _Fit(trial, context, args, options, plan, root, det_hooks)


def _conclude(fit: _Fit, result: FitResult, signals: preemption.SignalWatcher) -> None:
    """The chief's closing summary; then ``TrialPreempted`` if a signal asked to stop."""
    root, newest = fit.root, result.latest_checkpoint
    if fit.context.distributed.rank == 0:
        resume_from = root / newest if newest else fit.plan.path
        options = fit.options
        for line in closing_summary(
            result, options.searcher_metric, options.smaller_is_better, resume_from
        ):
            logger.info(line)
    signals.raise_if_received(root / newest if newest else root.latest(), root)


def _train(fit: _Fit, stop_signal: Callable[[bool], bool]) -> Tuple[FitResult, pl.Trainer]:
    """Builds the module and its data, restores the checkpoint, builds the loop and the
    ``lightning.Trainer``, trains; however it ends, releases what it built."""
    model = _model(fit)
    loop: Optional[_Loop] = None
    trainer: Optional[pl.Trainer] = None
    try:
        _restore(fit, model.module)
        loop = _loop(fit, model, stop_signal)
        # len(view): a run resumed mid-epoch starts with a shorter epoch.
        trainer = lightning_trainer(
            fit.context,
            fit.options,
            loop.trial_hooks,
            loop.schedule_cb,
            args=fit.args,
            first_epoch_len=len(model.data.view),
        )
        _run(fit, model, trainer, loop.schedule)
        return _finish(fit, model.module, loop), trainer
    except BaseException:
        if loop is not None:
            loop.manager.abandon()
        raise
    finally:
        _release(fit, model, loop, trainer)


def _model(fit: _Fit) -> _Model:
    """The ``TrialModule``, then the training data (its length kept in ``context.engine``,
    its one owner), then the validation loader; the training iterator is created last."""
    trial, context = fit.trial, fit.context
    progress = TrialProgress.from_trial_state(fit.plan.trial_state)
    module = TrialModule(
        TrialSetup(trial, context, fit.hooks, progress, fit.options.stop_on_nonfinite_loss)
    )
    start_batch = module.progress.batches_trained
    data = build_training_data(trial, context, start_batch, fit.plan.data_position)
    context.engine.epoch_len = data.view.epoch_len
    val_loader = build_validation_loader(trial, context, module.evaluates_batches)
    data.view.start()
    return _Model(module, data, val_loader, start_batch)


def _restore(fit: _Fit, module: TrialModule) -> None:
    """The checkpoint's state, after the training iterator exists (as Determined)."""
    if fit.plan.state is not None:
        logger.info(f"Restoring trial from checkpoint {fit.plan.path}")
        apply_state(module, fit.plan.state)


def _loop(fit: _Fit, model: _Model, stop_signal: Callable[[bool], bool]) -> _Loop:
    """The periods, the checkpoint manager, the trial's hooks (the module gets its loaders,
    validation's behind them), the ranks' stop agreement, and the callback that acts."""
    args, module = fit.args, model.module
    schedule = Schedule(
        args.max_length,
        args.validation_period,
        args.checkpoint_period,
        args.reporting_period,
        epoch_len=model.data.view.epoch_len,
        test_mode=args.test_mode,
    )
    manager = _checkpoint_manager(fit, model)
    trial_hooks = TrialHooks(module, determined_logging=True)
    module.use_data(model.data.view, HooksFirst(model.val_loader, trial_hooks.begin_validation))
    stops = preemption.StopAgreement(fit.context.distributed, stop_signal)
    schedule_cb = ScheduleCallback(
        module, schedule, manager, args.step_zero_validation, stops=stops, validation=trial_hooks
    )
    return _Loop(schedule, manager, trial_hooks, stops, schedule_cb)


def _checkpoint_manager(fit: _Fit, model: _Model) -> CheckpointManager:
    """The manager, continuing the run it resumes: best and retention span the trial's
    earlier runs."""
    options = fit.options
    manager = CheckpointManager(
        fit.root,
        model.module,
        policy=CheckpointPolicy(
            policy=fit.args.checkpoint_policy,
            metric=options.searcher_metric,
            smaller_is_better=options.smaller_is_better,
            metric_configured=options.searcher_metric_configured,
        ),
        sampler=model.data.sampler,
        base_seed=model.data.base_seed,
        skip_dirs=[pathlib.Path(options.tensorboard_dir)],
        retention=options.checkpoint_storage,
        background=not sync_checkpoints(options.sync_checkpoints),
    )
    manager.continue_run(fit.plan)
    return manager


def _run(fit: _Fit, model: _Model, trainer: pl.Trainer, schedule: Schedule) -> None:
    """Aligns Lightning with a restored run, then fits unless the run is already complete."""
    align_progress(trainer, model.module, len(fit.context.optimizers))
    if fit.plan.path is not None:
        restore_lightning_callbacks(trainer, fit.plan.path)
    start_batch = model.start_batch
    if schedule.is_done(start_batch):
        logger.info(f"Already trained {start_batch} batches of {schedule.total_batches()}.")
        return
    with warnings.catch_warnings():
        # Lightning 2.6 type-checks torch's deprecated pytree LeafSpec; torch >= 2.10
        # warns about it on every fit. It is not the user's business.
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
        # The metrics we self.log() are reduced across ranks already.
        warnings.filterwarnings("ignore", message=r".*sync_dist=True.*")
        # A shuffled validation loader is the trial's choice; Determined runs it as is.
        warnings.filterwarnings("ignore", message=r".*sampler has shuffling enabled.*")
        trainer.fit(model.module)


def _finish(fit: _Fit, module: TrialModule, loop: _Loop) -> FitResult:
    """Waits for the last write (complete, or its error raised, on every rank); what the fit
    did."""
    manager = loop.manager
    manager.finish()
    written = manager.written
    return FitResult(
        batches_trained=module.progress.batches_trained,
        validations=tuple(loop.trial_hooks.history),
        checkpoint_dir=fit.root,
        best_checkpoint=manager.best_uuid,
        latest_checkpoint=written[-1] if written else None,
        stopped_early=loop.schedule_cb.stopped_early,
        epochs_trained=module.progress.epochs_trained,
    )


def _release(
    fit: _Fit, model: _Model, loop: Optional[_Loop], trainer: Optional[pl.Trainer]
) -> None:
    """Ends the data workers, the TensorBoard writer, the stop agreement's group, and the
    trainer's use of the lean hook dispatch (Lightning's own is back once no fit runs)."""
    model.data.view.shutdown()
    fit.context.engine.close_tensorboard_writer()
    if loop is not None:
        loop.stops.close()
    if trainer is not None:
        hooks.release(trainer)
