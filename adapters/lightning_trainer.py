"""The ``lightning.Trainer`` of one ``fit()``: built from the Trainer's options with the fit's
callbacks, made lean (``lightning/``), and aligned with a restored run's counters.

Callback order: the trial's hooks, the schedule (which acts on the validation they reported),
profiling, then the user's. The one decision taken from Lightning is when to validate
(``schedule.ScheduleCallback.should_check_val``).
"""

import contextlib
import logging
import warnings
from typing import Any, Iterator, List

import lightning.pytorch as pl

from det_lightning.adapters import preemption
from det_lightning.adapters.callbacks import TrialHooks
from det_lightning.adapters.checkpoint_io import DeterminedCheckpointIO
from det_lightning.adapters.lightning import hooks, internals, lean, lean_results, lean_validation
from det_lightning.adapters.module import TrialModule
from det_lightning.adapters.precision import apply_precision
from det_lightning.adapters.profiler import profiling_callbacks
from det_lightning.adapters.schedule import ScheduleCallback
from det_lightning.adapters.trainer_args import lightning_trainer_kwargs
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._result import FitArgs, TrainerOptions


@contextlib.contextmanager
def quiet_lightning_setup() -> Iterator[None]:
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


def lightning_trainer(
    context: PyTorchTrialContext,
    options: TrainerOptions,
    trial_hooks: TrialHooks,
    schedule_cb: ScheduleCallback,
    *,
    args: FitArgs,
    first_epoch_len: int,
) -> pl.Trainer:
    """The ``lightning.Trainer`` for one fit (see the module docstring).

    Args:
        first_epoch_len: batches in the first epoch this run trains (shorter than an epoch
            when the run resumes mid-epoch; Lightning warns when an epoch is shorter than
            ``log_every_n_steps``).
    """
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
        epoch_len=first_epoch_len,
        user_kwargs=dict(options.lightning_kwargs),
        bar_metrics=(options.searcher_metric,),
    )
    kwargs = apply_precision(context, kwargs)
    with quiet_lightning_setup():
        trainer = pl.Trainer(**kwargs)
    preemption.supersede_lightning_signals(trainer)
    hooks.use_lean_dispatch(trainer)
    try:
        lean.install(trainer)
        lean_validation.install(trainer)
        lean_results.install(trainer)
        internals.answer_validation_checks(trainer, schedule_cb.should_check_val)
        internals.keep_on_device(trainer)
    except BaseException:  # no fit will release it: Lightning's own dispatch back now
        hooks.release(trainer)
        raise
    return trainer


def align_progress(trainer: pl.Trainer, module: TrialModule, n_optimizers: int) -> None:
    """Makes Lightning's counters agree with a restored run (epoch, logger step, global step)."""
    state = module.progress
    if state.batches_trained == 0:
        return
    steps = state.batches_trained // module.context.engine.aggregation_frequency * n_optimizers
    internals.align_progress(trainer, state.epochs_trained, state.batches_trained, steps)
