"""``run_fit``: one ``det_lightning.pytorch.Trainer.fit()`` call, on a ``lightning.Trainer``.

Order, as Determined's controller does it::

    callbacks = trial.build_callbacks()
    on_trial_startup(first_batch_idx, latest_checkpoint)
    build the loaders; create the training iterator      # its random draw precedes the restore
    [restore the checkpoint: on_checkpoint_load_start, weights, optimizers, RNG, ...]
    lightning.Trainer(...).fit(TrialModule)              # ScheduleCallback drives the periods
    on_trial_shutdown()                                  # always
"""

import contextlib
import dataclasses
import logging
import pathlib
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import lightning.pytorch as pl
import torch

from det_lightning import errors
from det_lightning.adapters import preemption
from det_lightning.adapters.callbacks import TrialHooks
from det_lightning.adapters.checkpoint_io import DeterminedCheckpointIO
from det_lightning.adapters.checkpoints import CheckpointManager
from det_lightning.adapters.data import HooksFirst, build_training_view, build_validation_loader
from det_lightning.adapters.lightning import hooks, internals, lean, lean_results, lean_validation
from det_lightning.adapters.module import TrialModule, TrialSetup
from det_lightning.adapters.precision import apply_precision
from det_lightning.adapters.profiler import profiling_callbacks
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
from det_lightning.adapters.trainer_args import lightning_trainer_kwargs
from det_lightning.adapters.trial_state import TrialProgress
from det_lightning.pytorch._background import sync_checkpoints
from det_lightning.pytorch._boundaries import Schedule
from det_lightning.pytorch._callback import PyTorchCallback
from det_lightning.pytorch._checkpoint_policy import CheckpointPolicy
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._data_position import DataPosition
from det_lightning.pytorch._dispatch import Dispatcher
from det_lightning.pytorch._result import FitArgs, FitResult, TrainerOptions
from det_lightning.pytorch._store import CheckpointStore
from det_lightning.pytorch._trial import PyTorchTrial, is_overridden, pre_012_api

logger = logging.getLogger("det_lightning.pytorch")


def check_trial(trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
    legacy = pre_012_api(type(trial))
    if legacy:
        raise errors.InvalidExperimentException(
            f"{type(trial).__name__} is written for Determined's PyTorchTrial API before 0.12 "
            f"({', '.join(legacy)}). Since 0.12 the trial builds its objects in "
            "__init__(self, context): self.model = context.wrap_model(...), self.opt = "
            "context.wrap_optimizer(...); train_batch(self, batch, epoch_idx, batch_idx) calls "
            "context.backward(loss) and context.step_optimizer(self.opt) and returns its "
            "metrics; evaluate_batch(self, batch) uses self.model."
        )
    if not context.models:
        raise errors.InvalidExperimentException(
            "Must have at least one model. This might be caused by not wrapping your model with "
            "wrap_model()."
        )
    if not context.optimizers:
        raise errors.InvalidExperimentException(
            "Must have at least one optimizer. This might be caused by not wrapping your "
            "optimizer with wrap_optimizer()."
        )
    if is_overridden(trial, "evaluate_batch") == is_overridden(trial, "evaluate_full_dataset"):
        raise errors.InvalidExperimentException(
            "Please define exactly one of: `evaluate_batch()` or `evaluate_full_dataset()`. For "
            "most use cases `evaluate_batch()` is recommended because it can be parallelized "
            "across all devices."
        )


def build_callbacks(trial: PyTorchTrial) -> Dict[str, PyTorchCallback]:
    callbacks = trial.build_callbacks()
    if not isinstance(callbacks, dict):
        raise TypeError(
            f"build_callbacks() returned a {type(callbacks).__name__}; it must return a dict of "
            "names to PyTorchCallback objects."
        )
    for name, callback in callbacks.items():
        if not isinstance(callback, PyTorchCallback):
            raise TypeError(
                f"build_callbacks()[{name!r}] is a {type(callback).__name__}, not a "
                "PyTorchCallback. Pass Lightning callbacks to Trainer(..., callbacks=[...])."
            )
        if type(callback).on_checkpoint_end is not PyTorchCallback.on_checkpoint_end:
            warnings.warn(
                "The on_checkpoint_end callback is deprecated, please use on_checkpoint_write_end "
                "instead.",
                FutureWarning,
                stacklevel=3,
            )
    return callbacks


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
    callbacks = build_callbacks(trial)
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
    signals = preemption.SignalWatcher(context.distributed)
    with signals:  # SIGTERM/SIGINT: checkpoint after this batch, then TrialPreempted
        det_hooks = Dispatcher(callbacks)
        det_hooks.on_trial_startup(plan.first_batch, args.latest_checkpoint)
        with _shutdown_after(det_hooks):
            result, trainer = _train(trial, context, args, options, signals, callbacks, plan, root)
    result = dataclasses.replace(result, seconds=time.monotonic() - started)
    newest = result.latest_checkpoint
    if context.distributed.rank == 0:
        resume_from = root / newest if newest else plan.path
        for line in closing_summary(
            result, options.searcher_metric, options.smaller_is_better, resume_from
        ):
            logger.info(line)
    signals.raise_if_received(root / newest if newest else root.latest(), root)
    return result, trainer


def _train(
    trial: PyTorchTrial,
    context: PyTorchTrialContext,
    args: FitArgs,
    options: TrainerOptions,
    stop_signal: Callable[[bool], bool],
    callbacks: Dict[str, PyTorchCallback],
    plan: ResumePlan,
    root: CheckpointStore,
) -> Tuple[FitResult, pl.Trainer]:
    module = TrialModule(
        TrialSetup(
            trial,
            context,
            callbacks,
            TrialProgress.from_trial_state(plan.trial_state),
            options.stop_on_nonfinite_loss,
        )
    )
    start_batch = module.progress.batches_trained
    position = plan.data_position
    base_seed = _base_seed(context, position)
    view, sampler = build_training_view(
        trial, context, start_batch, position.pass_states, base_seed, position.pass_starts
    )
    context.engine.epoch_len = view.epoch_len  # its one owner
    val_loader = build_validation_loader(trial, context, module.evaluates_batches)
    view.start()
    stops: Optional[preemption.StopAgreement] = None
    manager: Optional[CheckpointManager] = None
    trainer: Optional[pl.Trainer] = None
    try:
        if plan.state is not None:
            logger.info(f"Restoring trial from checkpoint {plan.path}")
            apply_state(module, plan.state)
        schedule = Schedule(
            args.max_length,
            args.validation_period,
            args.checkpoint_period,
            args.reporting_period,
            view.epoch_len,
            args.test_mode,
        )
        manager = CheckpointManager(
            root,
            module,
            policy=CheckpointPolicy(
                policy=args.checkpoint_policy,
                metric=options.searcher_metric,
                smaller_is_better=options.smaller_is_better,
                metric_configured=options.searcher_metric_configured,
            ),
            sampler=sampler,
            base_seed=base_seed,
            skip_dirs=[pathlib.Path(options.tensorboard_dir)],
            retention=options.checkpoint_storage,
            background=not sync_checkpoints(options.sync_checkpoints),
        )
        manager.continue_run(plan)  # best and retention span the trial's earlier runs
        trial_hooks = TrialHooks(module, determined_logging=True)
        module.use_data(view, HooksFirst(val_loader, trial_hooks.begin_validation))
        stops = preemption.StopAgreement(context.distributed, stop_signal)
        schedule_cb = ScheduleCallback(
            module, schedule, manager, args.step_zero_validation, stops, trial_hooks
        )
        # len(view): a run resumed mid-epoch starts with a shorter epoch, and Lightning warns
        # when an epoch is shorter than log_every_n_steps.
        trainer = _lightning_trainer(context, options, trial_hooks, schedule_cb, args, len(view))
        _align_progress(trainer, module, len(context.optimizers))
        if plan.path is not None:
            restore_lightning_callbacks(trainer, plan.path)
        if schedule.is_done(start_batch):
            logger.info(f"Already trained {start_batch} batches of {schedule.total_batches()}.")
        else:
            with warnings.catch_warnings():
                # Lightning 2.6 type-checks torch's deprecated pytree LeafSpec; torch >= 2.10
                # warns about it on every fit. It is not the user's business.
                warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
                # The metrics we self.log() are reduced across ranks already.
                warnings.filterwarnings("ignore", message=r".*sync_dist=True.*")
                # A shuffled validation loader is the trial's choice; Determined runs it as is.
                warnings.filterwarnings("ignore", message=r".*sampler has shuffling enabled.*")
                trainer.fit(module)
        manager.finish()  # the last write is complete (or its error raised) on every rank
        written = manager.written
        return FitResult(
            batches_trained=module.progress.batches_trained,
            validations=tuple(trial_hooks.history),
            checkpoint_dir=root,
            best_checkpoint=manager.best_uuid,
            latest_checkpoint=written[-1] if written else None,
            stopped_early=schedule_cb.stopped_early,
            epochs_trained=module.progress.epochs_trained,
        ), trainer
    except BaseException:
        if manager is not None:
            manager.abandon()
        raise
    finally:
        view.shutdown()
        context.engine.close_tensorboard_writer()
        if stops is not None:
            stops.close()
        if trainer is not None:
            hooks.release(trainer)  # Lightning's own dispatch back once no fit runs


@contextlib.contextmanager
def _quiet_lightning_setup() -> Iterator[None]:
    """Lightning announces devices and settings we chose on purpose (validation scheduling, no
    sanity check); keep the user's log to what concerns their run."""
    quiet = [
        logging.getLogger(name)
        for name in (
            "lightning.pytorch.utilities.rank_zero",
            "lightning.fabric.utilities.rank_zero",
        )
    ]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*val_check_interval.*")
            yield
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


def _base_seed(context: PyTorchTrialContext, position: DataPosition) -> Optional[int]:
    """With several processes every rank must shuffle alike: derive pass seeds from the chief's
    initial torch seed (no draw, so the chief's random stream is untouched); a resumed run
    keeps its checkpoint's."""
    if position.base_seed is not None:
        return position.base_seed
    if context.distributed.size == 1:
        return None
    return int(context.distributed.broadcast(torch.initial_seed()))


def _lightning_trainer(
    context: PyTorchTrialContext,
    options: TrainerOptions,
    trial_hooks: TrialHooks,
    schedule_cb: ScheduleCallback,
    args: FitArgs,
    epoch_len: int,
) -> pl.Trainer:
    """The ``lightning.Trainer`` for one fit. Callback order: the trial's hooks, the schedule
    (which acts on the validation they reported), profiling, then the user's."""
    loggers: List[Any] = list(options.loggers) if options.loggers is not None else []
    if options.loggers is None and context.get_enable_tensorboard_logging():
        from det_lightning.adapters.tensorboard import DeterminedTensorBoardLogger

        loggers = [DeterminedTensorBoardLogger(save_dir=str(options.tensorboard_dir))]
    profiling = profiling_callbacks(schedule_cb.module, args.profiling_enabled, options.profiler)
    kwargs = lightning_trainer_kwargs(
        launch=options.launch.trainer_kwargs(),
        callbacks=[trial_hooks, schedule_cb, *profiling, *options.callbacks],
        loggers=loggers,
        plugins=[DeterminedCheckpointIO(), *options.plugins],
        default_root_dir=str(options.default_root_dir),
        test_mode=args.test_mode,
        epoch_len=epoch_len,
        user_kwargs=dict(options.lightning_kwargs),
        bar_metrics=(options.searcher_metric,),
    )
    kwargs = apply_precision(context, kwargs)
    with _quiet_lightning_setup():
        trainer = pl.Trainer(**kwargs)
    preemption.supersede_lightning_signals(trainer)
    hooks.use_lean_dispatch(trainer)
    lean.install(trainer)
    lean_validation.install(trainer)
    lean_results.install(trainer)
    # The one decision we take from Lightning: when to validate (see schedule.py).
    internals.answer_validation_checks(trainer, schedule_cb.should_check_val)
    return trainer


def _align_progress(trainer: pl.Trainer, module: TrialModule, n_optimizers: int) -> None:
    """Makes Lightning's counters agree with a restored run (epoch, logger step, global step)."""
    state = module.progress
    if state.batches_trained == 0:
        return
    steps = state.batches_trained // module.context.engine.aggregation_frequency * n_optimizers
    internals.align_progress(trainer, state.epochs_trained, state.batches_trained, steps)
