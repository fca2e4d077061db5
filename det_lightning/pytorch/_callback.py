"""``PyTorchCallback``: hooks a trial registers through ``build_callbacks()``.

Order of the hooks within ``Trainer.fit()`` (the adapter's ``callbacks.py`` maps each one onto
the Lightning hook that calls it)::

    on_trial_startup(first_batch_idx, checkpoint_uuid)
    [on_checkpoint_load_start(checkpoint)]            # when resuming
    on_training_start()
    for each batch:
        [on_training_epoch_start(epoch_idx)]          # first batch of an epoch
        train_batch(...)
        [on_training_epoch_end(epoch_idx)]            # last batch of an epoch
        when a period is reached:
            on_training_workload_end(avg_metrics, batch_metrics)
            [validation]: on_validation_start(); on_validation_epoch_start();
                          evaluate_batch(...)...; on_validation_epoch_end(outputs);
                          on_validation_end(metrics)
            [checkpoint]: on_checkpoint_save_start(checkpoint); <write>;
                          on_checkpoint_end(dir); on_checkpoint_write_end(dir);
                          on_checkpoint_upload_end(uuid)
    on_trial_shutdown()                               # always, also after an exception
"""

from typing import Any, Dict, List, Optional


class PyTorchCallback:
    """Override the hooks you need; each default does nothing."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        """Before anything else in ``fit()``; ``first_batch_idx`` is nonzero when resuming."""

    def on_trial_shutdown(self) -> None:
        """After training ends, however it ends."""

    def on_training_start(self) -> None:
        """After the checkpoint (if any) is restored, before the first batch."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of an epoch. The older form without ``epoch_idx`` is still
        called (without it), with a deprecation warning, as in Determined."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of an epoch."""

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        """When a period is reached: the training metrics since the previous one."""

    def on_validation_start(self) -> None:
        """Before validation (the models are already in eval mode)."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch (only with ``evaluate_batch``)."""

    def on_validation_epoch_end(self, outputs: List[Any]) -> None:
        """After the last validation batch, with every batch's metrics (``evaluate_batch``)."""

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        """After validation, with the reduced metrics."""

    def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
        """Before the loaded ``state_dict.pth`` content is applied; may edit it."""

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        """Before ``state_dict.pth`` is written; may add entries to it."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated in Determined: use ``on_checkpoint_write_end``."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After every file of the checkpoint is in ``checkpoint_dir``; more may be added."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is complete and renamed into place."""

    def state_dict(self) -> Dict[str, Any]:
        """State saved with each checkpoint under this callback's name."""
        return {}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""
