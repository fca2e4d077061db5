"""The lean path between two training batches: ``done`` and ``on_advance_end`` of Lightning's
training-epoch loop for a manual-optimization fit, which never accumulates gradients and steps
no learning-rate scheduler (``lean.py``'s second table says what each leaves out). Decided once
per epoch (``on_run_start``): outside that case, and on a restart or a stop request, Lightning's
own code runs.
"""

from typing import Any

from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.trainer import call
from lightning.pytorch.utilities.exceptions import SIGTERMException

from det_lightning.adapters.lightning import versions
from det_lightning.adapters.lightning.calls import plain_run


class BetweenBatchesLoop(_TrainingEpochLoop):
    """Lightning's training-epoch loop whose ``done`` and ``on_advance_end`` take the lean path
    when they can (the base of ``lean.LeanTrainingEpochLoop``)."""

    _lean_between = False  # done/on_advance_end may take the lean path (set per epoch)
    _lean_skips_next_val = False  # on_advance_end honours _skip_next_val (versions.Shape)

    def on_run_start(self, data_fetcher: Any) -> None:
        trainer = self.trainer
        shape = versions.SHAPE
        self._lean_between = (
            plain_run(trainer) and shape is not None and trainer.accumulate_grad_batches == 1
        )
        self._lean_skips_next_val = shape is not None and shape.skips_next_val
        super().on_run_start(data_fetcher)

    def _lean_training_done(self) -> bool:
        """``_is_training_done`` under manual optimization, where ``global_step`` is the
        optimizers' completed steps."""
        if self.max_steps != -1 and (
            self.manual_optimization.optim_step_progress.total.completed >= self.max_steps
        ):
            return True
        progress = self.batch_progress
        return progress.current.ready == self.trainer.fit_loop.max_batches or progress.is_last_batch

    @property
    def done(self) -> bool:
        """Lightning's ``done`` (the same in every release of ``versions.TABLE``): not
        restarting, validation counts as done, so training done means done; a stop request
        takes Lightning's own path."""
        if not self._lean_between or self._restarting:
            return super().done
        # (_lean_training_done, inlined)
        if self.max_steps != -1 and (
            self.manual_optimization.optim_step_progress.total.completed >= self.max_steps
        ):
            return True
        progress = self.batch_progress
        if progress.current.ready == self.trainer.fit_loop.max_batches or progress.is_last_batch:
            return True
        if self.trainer.should_stop:
            return super().done
        return False

    def on_advance_end(self, data_fetcher: Any) -> None:
        """Follows ``_TrainingEpochLoop.on_advance_end`` of 2.4.0 and of 2.5.0 on (which
        honours ``_skip_next_val``) under manual optimization: never accumulating, so the
        zero_grad hook runs before a validation and ``_batches_that_stepped`` counts every
        batch; no learning-rate scheduler to step."""
        if not self._lean_between:
            super().on_advance_end(data_fetcher)
            return
        trainer = self.trainer
        should_check_val = self._should_check_val_fx(data_fetcher)
        if self._lean_skips_next_val and self._skip_next_val:
            should_check_val = False
            self._skip_next_val = False
        if should_check_val:
            trainer.validating = True  # picks the evaluation loop as trainer._active_loop
            connector = trainer._logger_connector
            first_loop_iter = connector._first_loop_iter
            call._call_lightning_module_hook(trainer, "on_validation_model_zero_grad")
            self.val_loop.run()
            trainer.training = True
            connector._first_loop_iter = first_loop_iter
        self._batches_that_stepped += 1
        if trainer.should_stop:
            for logger in trainer.loggers:
                logger.save()
        # (trainer.received_sigterm's value)
        if trainer._signal_connector.received_sigterm and not self._lean_training_done():
            raise SIGTERMException
