"""Lightning hooks forwarded to a trial's ``PyTorchCallback``s.

Under ``det_lightning.pytorch.Trainer.fit()`` the hooks fire in Determined's order and with its
arguments (``tests/integration/test_callbacks_order.py`` compares them with the real Determined).
Lightning's hook (and who forwards it) on the left, the ``PyTorchCallback`` calls on the right::

    fit.run_fit, before Lightning         on_trial_startup(first_batch_idx, latest_checkpoint)
      [resume] resume.apply_state         on_checkpoint_load_start(state_dict)
                                          load_state_dict(state)   # each callback's own state
    lightning.Trainer.fit(TrialModule)
      setup, on_fit_start
      on_train_start (TrialHooks)         on_training_start()
                                          [step_zero_validation: a validation, as below]
      for each batch:
        on_train_batch_start
        training_step (TrialModule)       [on_training_epoch_start(epoch_idx)]
                                          train_batch(batch, epoch_idx, batch_idx)
                                          [on_training_epoch_end(epoch_idx)]
        on_train_batch_end (Schedule...)  on_training_workload_end(avg_metrics, batch_metrics)
                                          when a period is reached; then, if due:
        [validation, Lightning's loop; TrialHooks forwards]
          iter(val loader) (HooksFirst)   model.eval(); on_validation_start()
                                          on_validation_epoch_start()      # evaluate_batch
                                          then the loader's iterator (a torch draw), as in
                                          Determined; Lightning makes it before its hooks
          on_validation_start, on_validation_epoch_start: already forwarded
          validation_step                 evaluate_batch(...) per batch (or evaluate_full_dataset)
          on_validation_batch_end         (TrialHooks keeps the batch's metrics)
          on_validation_epoch_end         on_validation_epoch_end(outputs) # evaluate_batch
          on_validation_end               on_validation_end(metrics)
        [checkpoint, save_checkpoint]
          on_save_checkpoint              state_dict()
          (CheckpointIO, rank 0)          on_checkpoint_save_start(state_dict)
                                          on_checkpoint_end(path); on_checkpoint_write_end(path)
                                          on_checkpoint_upload_end(uuid)
        on_train_epoch_end                (a Lightning epoch is a Determined epoch)
      on_train_end (ScheduleCallback)     [a final checkpoint, as above, if a Lightning
                                           callback stopped training]
      on_fit_end
    fit.run_fit, finally                  on_trial_shutdown()   # also after an exception

Under your own ``lightning.Trainer`` (``LightningTrial``), Lightning's settings replace the
periods; :class:`PyTorchCallbackBridge` and :class:`TrialHooks` forward::

    setup("fit")                  the context and the trial are built (rank and device known)
    on_load_checkpoint            on_trial_startup(batches_trained, ckpt_path)  # ckpt_path=...
                                  on_checkpoint_load_start(checkpoint); load_state_dict(state)
    on_fit_start                  on_trial_startup(0, None)                     # fresh start
    on_train_start                on_training_start()
    training_step                 on_training_epoch_start / train_batch / on_training_epoch_end
    on_train_batch_end            on_training_workload_end(...) every log_every_n_steps batches
    on_train_epoch_end            on_training_workload_end(...) for the epoch's other batches
    validation                    on_validation_start ... on_validation_end (not the sanity check)
    test                          the same validation hooks, around test_step
    on_save_checkpoint            state_dict(); on_checkpoint_save_start(checkpoint)
                                  (Lightning's dict; ModelCheckpoint writes the file, so there
                                  are no write/upload hooks)
    on_fit_end, on_exception      on_trial_shutdown()
"""

from typing import Any, Dict, List, Optional

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from det_lightning.adapters import metrics as metric_utils
from det_lightning.adapters.module import TrialModule
from det_lightning.adapters.preemption import StopAgreement
from det_lightning.adapters.reporting import (
    TrainingReport,
    ValidationBuffer,
    log_validation_to_loggers,
)
from det_lightning.pytorch._boundaries import Boundary


class TrialHooks(Callback):
    """Forwards the training-start, validation and test hooks to the trial's callbacks, and
    collects, reduces and reports each validation's metrics; both front ends use it.

    Args:
        module: the ``TrialModule`` (or ``LightningTrial``).
        determined_logging: report validations as Determined does (``det_lightning.pytorch.
            Trainer``): metrics go to the loggers as ``Determined/val_<name>`` and the dict the
            callbacks got gains ``batches``/``epochs``. Otherwise (``LightningTrial``) they are
            ``self.log``'ged for Lightning's loggers and monitors under the trial's own names.
    """

    def __init__(self, module: TrialModule, determined_logging: bool) -> None:
        self.module = module
        self.determined_logging = determined_logging
        self.history: List[Dict[str, Any]] = []  # every validation's metrics, oldest first
        self.buffer = ValidationBuffer()  # the current validation's batches
        self.metrics: Dict[str, Any] = {}  # the last validation's metrics, reduced
        self._validating = False  # begin_validation ran for the current pass

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.module.det_hooks.on_training_start()

    def begin_validation(self) -> None:
        """Determined's start of a validation: models to eval mode, reducers reset, then
        ``on_validation_start`` and (for ``evaluate_batch``) ``on_validation_epoch_start``.

        ``HooksFirst`` calls it before the validation iterator exists, as Determined does (a
        callback's random draws there come before the iterator's); without it (``LightningTrial``)
        Lightning's validation hooks call it, after Lightning made the iterator.
        """
        if self._validating:
            return
        self._validating = True
        module = self.module
        for model in module.context.models:
            model.eval()
        module.context.reset_reducers()
        self.buffer = ValidationBuffer()
        self.metrics = {}
        module.det_hooks.on_validation_start()
        if module.evaluates_batches:
            module.det_hooks.on_validation_epoch_start()

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.begin_validation()

    @override
    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        module = self.module
        if module.evaluates_batches:
            self.buffer.add(outputs, module.batch_records)
        elif outputs is not None:  # evaluate_full_dataset's, on the chief
            self.buffer.whole = outputs

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        module = self.module
        if module.evaluates_batches:
            module.det_hooks.on_validation_epoch_end(self.buffer.numpy_outputs())
        self.metrics = self.buffer.reduce(module.trial, module.context, module.evaluates_batches)
        # Under LightningTrial, loggers, ModelCheckpoint(monitor=...) and trainer.validate()'s
        # results see them under the trial's own names.
        for name, value in metric_utils.host_scalars(self.metrics).items():
            # logger=None: Lightning's default, which stays quiet when there is no logger.
            logger = False if self.determined_logging else None
            module.log(name, value, logger=logger, sync_dist=False)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        module = self.module
        state = module.progress
        metrics = self.metrics
        self._validating = False
        module.det_hooks.on_validation_end(metrics)
        state.last_val = state.batches_trained
        reported = metrics if self.determined_logging else dict(metrics)
        if self.determined_logging:
            module.context.reset_reducers()  # the next training workload starts fresh
        if module.context.distributed.rank == 0:
            if self.determined_logging:
                module.context.engine.metrics_reported = True
                log_validation_to_loggers(trainer, metrics, state.batches_trained)
            # Determined's chief adds these while reporting, to the very dict its callbacks got
            # (a callback that kept it sees them).
            reported.setdefault("batches", state.batches_trained)
            reported.setdefault("epochs", state.epochs_trained)
            metric_utils.log_validation(state.batches_trained, reported)
        self.history.append(dict(metrics))

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_start(trainer, pl_module)

    @override
    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    @override
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_epoch_end(trainer, pl_module)

    @override
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_end(trainer, pl_module)


class PyTorchCallbackBridge(Callback):
    """``LightningTrial``'s periods: Lightning's own settings decide when to validate,
    checkpoint and stop; this reports every ``log_every_n_steps`` batches and at each epoch's
    end, starts and shuts the trial down, and stops every rank when one asks to.

    Args:
        module: the ``LightningTrial``.
    """

    def __init__(self, module: TrialModule) -> None:
        self.module = module
        self.report = TrainingReport(module)
        self.stops: Optional[StopAgreement] = None  # once the trial's context exists
        self.started = False

    # ----- trial start and end --------------------------------------------------------------
    def start_trial(self, first_batch_idx: int, checkpoint: Optional[str]) -> None:
        """``on_trial_startup`` once per fit, before any restore."""
        if self.started:
            return
        self.started = True
        self.module.det_hooks.on_trial_startup(first_batch_idx, checkpoint)

    def _shutdown(self) -> None:
        if self.stops is not None:
            self.stops.close()
        if not self.started:
            return
        self.started = False
        self.module.det_hooks.on_trial_shutdown()

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start_trial(0, None)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._shutdown()

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._shutdown()

    # ----- training -------------------------------------------------------------------------
    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batches = trainer.num_training_batches
        if isinstance(batches, int) and batches > 0:
            self.module.context.engine.epoch_len = batches

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        module = self.module
        batches_trained = module.progress.batches_trained
        reported = batches_trained % trainer.log_every_n_steps == 0  # type: ignore[attr-defined]
        if reported:
            self.report.report(trainer)
        if self.stops is None:
            self.stops = StopAgreement(module.context.distributed, lambda local: local)
        # Any rank's request stops every rank at the same batch (a rank that stopped alone
        # would leave the others waiting in the next collective).
        boundary = {Boundary.REPORT} if reported else set()
        local = module.context.get_stop_requested()
        if self.stops.after_batch(batches_trained, boundary, local):
            trainer.should_stop = True

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.module.progress.workload_metrics:
            self.report.report(trainer)
