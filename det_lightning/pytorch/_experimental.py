"""``context.experimental``: switches Determined kept outside the main context API."""

import logging
from typing import Any

logger = logging.getLogger("det_lightning.pytorch")


class PyTorchExperimentalContext:
    def __init__(self, parent: Any) -> None:
        self._parent = parent  # the context; these switches are kept in its ``engine``

    def use_amp(self) -> None:
        """Automatic mixed precision: forward passes autocast, losses scaled, steps unscaled.

        Under det_lightning this is Lightning's mixed precision (``precision="16-mixed"`` on a GPU,
        ``"bf16-mixed"`` on a CPU, which needs no loss scaling).
        """
        import torch

        self._parent.engine.auto_amp = True
        if torch.cuda.is_available():
            self._parent.wrap_scaler(torch.amp.GradScaler("cuda"))

    def disable_dataset_reproducibility_checks(self) -> None:
        """Accept plain ``torch.utils.data.DataLoader``s from the trial, used as they are."""
        self._parent.engine.data_repro_checks_disabled = True
        logger.info("disabled dataset reproducibility checks")

    def disable_auto_to_device(self) -> None:
        """Hand batches to ``train_batch``/``evaluate_batch`` without moving them to the device."""
        self._parent.engine.auto_to_device = False
        logger.info("disabled automatically moving data to device")
