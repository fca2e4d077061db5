"""Lightning hooks forwarded to a trial's ``PyTorchCallback``s.

Under ``det_lightning.pytorch.Trainer.fit()`` the hooks fire in Determined's order and with its
arguments (``tests/integration/test_callbacks_order.py`` compares them with the real Determined).
Lightning's hook (and who forwards it) on the left, the ``PyTorchCallback`` calls on the right::

    fit.run_fit, before Lightning         on_trial_startup(first_batch_idx, latest_checkpoint)
      [resume] resume.apply_state         on_checkpoint_load_start(state_dict)
                                          load_state_dict(state)   # each callback's own state
    lightning.Trainer.fit(TrialModule)
      setup, on_fit_start
      on_train_start (ScheduleCallback)   on_training_start()
                                          [step_zero_validation: a validation, as below]
      for each batch:
        on_train_batch_start
        training_step (TrialModule)       [on_training_epoch_start(epoch_idx)]
                                          train_batch(batch, epoch_idx, batch_idx)
                                          [on_training_epoch_end(epoch_idx)]
        on_train_batch_end (Schedule...)  on_training_workload_end(avg_metrics, batch_metrics)
                                          when a period is reached; then, if due:
        [validation, Lightning's loop]
          on_validation_start             on_validation_start()
          on_validation_epoch_start       on_validation_epoch_start()      # evaluate_batch
          validation_step                 evaluate_batch(...) per batch (or evaluate_full_dataset)
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
periods and :class:`PyTorchCallbackBridge` forwards::

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

from typing import Any, Dict, Optional

import lightning.pytorch as pl
from typing_extensions import override

from det_lightning.adapters import metrics as metric_utils
from det_lightning.adapters.schedule import ScheduleCallback


class PyTorchCallbackBridge(ScheduleCallback):
    """``ScheduleCallback``'s forwarding of hooks, with Lightning's own settings deciding when to
    validate, checkpoint and stop (``LightningTrial`` under a user's ``lightning.Trainer``).

    Args:
        module: the ``LightningTrial``.
    """

    def __init__(self, module: Any) -> None:
        # No periods and no Determined checkpoints: the hooks that use them are overridden.
        super().__init__(module, None, None, step_zero_validation=False)  # type: ignore[arg-type]
        self.started = False

    # ----- trial start and end --------------------------------------------------------------
    def start_trial(self, first_batch_idx: int, checkpoint: Optional[str]) -> None:
        """``on_trial_startup`` once per fit, before any restore."""
        if self.started:
            return
        self.started = True
        for callback in self.module.det_callbacks.values():
            callback.on_trial_startup(first_batch_idx, checkpoint)

    def _shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        for callback in self.module.det_callbacks.values():
            callback.on_trial_shutdown()

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
            self.module.epoch_len = self.module.context._epoch_len = batches

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        module = self.module
        batches_trained = module.state.batches_trained
        if batches_trained % trainer.log_every_n_steps == 0:  # type: ignore[attr-defined]
            self._end_workload(trainer, batches_trained)
        # Any rank's request stops every rank at this batch (a rank that stopped alone would
        # leave the others waiting in the next collective).
        stop = module.context._stop_requested
        if module.context.distributed.size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            trainer.should_stop = True

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.module.state.workload_metrics:
            self._end_workload(trainer, self.module.state.batches_trained)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Checkpoints are Lightning's (``ModelCheckpoint``); nothing to save here."""

    # ----- validation and test --------------------------------------------------------------
    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            super().on_validation_start(trainer, pl_module)

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            super().on_validation_epoch_start(trainer, pl_module)

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        module = self.module
        if module._evaluate_batch:
            for callback in module.det_callbacks.values():
                callback.on_validation_epoch_end(module.val_outputs)
        module.val_metrics = self._reduce_validation()
        # Logged as Lightning metrics: loggers, ModelCheckpoint(monitor=...) and
        # trainer.validate()/test()'s results see them under the trial's own names.
        for name, value in metric_utils.scalars(module.val_metrics).items():
            module.log(name, value, sync_dist=False)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        module = self.module
        metrics: Dict[str, Any] = module.val_metrics
        for callback in module.det_callbacks.values():
            callback.on_validation_end(metrics)
        module.state.values["last_val"] = module.state.batches_trained
        self.validation_history.append(dict(metrics))
        if module.context.distributed.rank == 0:
            reported = dict(metrics)
            reported.setdefault("batches", module.state.batches_trained)
            reported.setdefault("epochs", module.state.epochs_trained)
            metric_utils.log_validation(module.state.batches_trained, reported)

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_start(trainer, pl_module)

    @override
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_epoch_start(trainer, pl_module)

    @override
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_epoch_end(trainer, pl_module)

    @override
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_end(trainer, pl_module)
