"""The TensorBoard logger det_lightning starts when a trial has none of its own.

Lightning's ``TensorBoardLogger.log_metrics`` does per call what det_lightning never needs: a
rank check through a decorator, the ``experiment`` property (another decorator), a prefix,
flattening nested dicts and turning tensors into numbers. det_lightning reports plain floats
(``metrics.scalars``) once per batch at each reporting period, as Determined's
``_log_tb_metrics`` does with its ``SummaryWriter``. This logger writes those straight to the
writer with ``add_scalar``: the same events in the same files, about as few calls per batch as
Determined makes (``benchmarks/run.py --instructions``, the ``det_lightning+tb`` and
``determined+tb`` systems). Anything else (a tensor, a dict, a call from another rank) takes
Lightning's own path.
"""

from typing import Any, Mapping, Optional

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


class DeterminedTensorBoardLogger(TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` with a direct path for float metrics (see the module)."""

    def __init__(self, save_dir: str) -> None:
        super().__init__(save_dir=save_dir, name="", version="")
        self._writer: Optional[Any] = None

    def log_metrics(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        if getattr(rank_zero_only, "rank", 0) != 0 or not _all_floats(metrics):
            super().log_metrics(dict(metrics), step)
            return
        writer = self._writer
        if writer is None:
            writer = self._writer = self.experiment
        for name, value in metrics.items():
            writer.add_scalar(name, value, step)

    def finalize(self, status: str) -> None:
        self._writer = None  # Lightning closes the writer; a later write opens a new one
        super().finalize(status)


def _all_floats(metrics: Mapping[str, Any]) -> bool:
    for value in metrics.values():
        if type(value) is not float:
            return False
    return True
