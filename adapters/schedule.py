"""``ScheduleCallback``: Determined's periods as Lightning loop decisions.

After each training batch (``on_train_batch_end``)::

    reached = schedule.reached(batches_trained)          # VALIDATE / CHECKPOINT / REPORT / TRAIN
    stop = stops.agree(...)     if stops.due(...)    # a collective with several ranks (preemption.py)
    for action in decide(reached, stop, validation_is_current):   # pytorch/_boundaries.py, pure
        REPORT      TrainingReport.report                 (reporting.py)
        STOP        trainer.should_stop = True
        CHECKPOINT  CheckpointManager.save                (unless the newest is of this batch;
                                                           written in the background: checkpoints.py)
        VALIDATE    answer Lightning's "validate now?" with yes; the actions after it wait
    [Lightning runs the validation; TrialHooks reduces and reports it]
    on_validation_epoch_end: wait for a checkpoint being written (before the report)
    on_validation_end: a checkpoint if the policy wants this validation's; agree on stopping
                       again; the waiting actions (after_validation)

Lightning asks ``epoch_loop._should_check_val_fx`` whether to validate after each batch; we
answer it, so validation runs inside Lightning's own loop (its callbacks, loggers, and metric
monitors see it) at exactly Determined's batches. Checkpoints go through
``Trainer.save_checkpoint`` (see ``checkpoint_io``).
"""

from typing import Any, Tuple

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from det_lightning import errors
from det_lightning.adapters.callbacks import TrialHooks
from det_lightning.adapters.checkpoints import CheckpointManager
from det_lightning.adapters.lightning import internals
from det_lightning.adapters.module import TrialModule
from det_lightning.adapters.preemption import StopAgreement
from det_lightning.adapters.reporting import TrainingReport
from det_lightning.pytorch._boundaries import Action, Schedule, after_validation, decide


class ScheduleCallback(Callback):
    """Runs Determined's schedule for ``module`` inside a Lightning fit.

    Args:
        module: the ``TrialModule``.
        schedule: the periods.
        checkpoints: the checkpoint manager.
        step_zero_validation: validate before the first batch.
        stops: when and how the ranks agree on stopping (a signal, ``set_stop_requested``).
        validation: the callback that reduces each validation's metrics (it runs first).
    """

    def __init__(
        self,
        module: TrialModule,
        schedule: Schedule,
        checkpoints: CheckpointManager,
        step_zero_validation: bool,
        *,
        stops: StopAgreement,
        validation: TrialHooks,
    ) -> None:
        self.module = module
        self.validation = validation
        self.schedule = schedule
        self.checkpoints = checkpoints
        self.step_zero_validation = step_zero_validation
        self.stops = stops
        self.report = TrainingReport(module)
        self.validate_now = False
        self.waiting: Tuple[Action, ...] = ()  # the actions after a validation that runs now
        self.stopped_early = False

    def should_check_val(self, data_fetcher: Any = None) -> bool:
        """Replaces Lightning's ``_should_check_val_fx``."""
        return self.validate_now

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.step_zero_validation and self.module.progress.batches_trained == 0:
            self.validate_now = True
            internals.validate_now(trainer)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The first epoch of a resumed run is shorter; tell Lightning each epoch's length.
        internals.set_epoch_length(trainer, len(self.module.train_loader))

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        checkpoints = self.checkpoints
        if checkpoints.pending is not None:  # a background write: its hooks once it is done
            checkpoints.poll()
        state = self.module.progress
        batches_trained = state.batches_trained
        reached = self.schedule.reached(batches_trained)
        local = self.module.context.get_stop_requested()
        stop = self.stops.after_batch(batches_trained, reached, local)
        if reached or stop:
            self._run(trainer, decide(reached, stop, state.validation_is_current()))

    def _agree_on_stopping(self) -> bool:
        # Never short-circuit on the local flag: a rank that skipped the agreement would leave
        # the others waiting in it forever.
        module = self.module
        return self.stops.agree(
            module.progress.batches_trained, module.context.get_stop_requested()
        )

    def _run(self, trainer: pl.Trainer, actions: Tuple[Action, ...]) -> None:
        """Carries ``actions`` out in order, up to a validation (which Lightning runs next)."""
        for position, action in enumerate(actions):
            if action is Action.REPORT:
                self.report.report(trainer)
            elif action is Action.STOP:
                trainer.should_stop = True
                batches_trained = self.module.progress.batches_trained
                self.stopped_early = not self.schedule.is_done(batches_trained)
            elif action is Action.CHECKPOINT:
                if not self.module.progress.checkpoint_is_current():
                    self.checkpoints.save(trainer)
            else:  # VALIDATE
                self.validate_now = True
                self.waiting = actions[position + 1 :]
                return

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Before TrialHooks reports the validation (on_validation_end): a checkpoint taken
        # before it is complete by then, so a search that acts on the report finds it.
        self.checkpoints.wait_for_write()

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After TrialHooks: the validation's metrics are reduced and reported.
        if trainer.sanity_checking:
            return
        self.validate_now = False
        metrics = self.validation.metrics
        dist = self.module.context.distributed
        wants = self.checkpoints.wants_checkpoint_after_validation(metrics)
        if dist.broadcast(wants) and not self.module.progress.checkpoint_is_current():
            self.checkpoints.save(trainer)
        waiting, self.waiting = self.waiting, ()
        self._run(trainer, after_validation(waiting, self._agree_on_stopping()))

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # Determined checkpoints the batches trained since the last checkpoint before a trial
        # that raised InvalidHP exits (_pytorch_trial.py). Saving is collective: with several
        # processes the other ranks never raised, so only a single process saves.
        state = self.module.progress
        if (
            isinstance(exception, errors.InvalidHP)
            and state.batches_trained > 0
            and not state.checkpoint_is_current()
            and self.module.context.distributed.size == 1
        ):
            self.checkpoints.save(trainer)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Training can end through a Lightning callback (EarlyStopping) too: report the batches
        # trained since the last period and leave a checkpoint of the final weights.
        state = self.module.progress
        if state.workload_metrics:
            self.report.report(trainer, in_loop=False)
        if state.batches_trained > 0 and not state.checkpoint_is_current():
            self.checkpoints.save(trainer)
