"""``core.TrainContext`` in local mode: metrics to the log and to TensorBoard.

Determined's local mode logs each report and keeps nothing; here the chief also writes the
numerical scalars to TensorBoard under the names a trial's metrics get (``Determined/<name>``,
``Determined/val_<name>``) when ``tensorboard_mode`` is ``AUTO``. As in Determined's local mode,
any metrics dict is accepted.
"""

import logging
import pathlib
from typing import Any, Callable, Dict, List, Optional

from det_lightning.core._distributed import DistributedContext
from det_lightning.core._modes import EarlyExitReason, TensorboardMode
from det_lightning.util import is_numerical_scalar

logger = logging.getLogger("det_lightning.core")


class TrainContext:
    """Reports metrics of a Core API loop.

    Args:
        dist: this process's rank information.
        tensorboard_path: the TensorBoard run directory.
        tensorboard_mode: ``AUTO`` writes reported metrics there (on the chief).
    """

    def __init__(
        self,
        dist: DistributedContext,
        tensorboard_path: pathlib.Path,
        tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
        *,
        on_validation: Optional[Callable[[int, Dict[str, Any]], None]] = None,
        best_validation: Optional[Callable[[], Optional[float]]] = None,
    ) -> None:
        self._dist = dist
        self._on_validation = on_validation  # a search's trial: the chief reports to it
        self._best_validation = best_validation  # and asks it for the experiment's best
        self._tensorboard_path = tensorboard_path
        self._tensorboard_mode = TensorboardMode(tensorboard_mode)
        self._writer: Any = None

    def set_status(self, status: str) -> None:
        logger.info(f"status: {status}")

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: Dict[str, Any],
        batch_metrics: Optional[List[Dict[str, Any]]] = None,
    ) -> None:
        logger.info(
            f"report_training_metrics(steps_completed={steps_completed}, metrics={metrics})"
        )
        self._write("", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Dict[str, Any]) -> None:
        logger.info(
            f"report_validation_metrics(steps_completed={steps_completed}, metrics={metrics})"
        )
        self._write("val_", steps_completed, metrics)
        if self._on_validation is not None:
            self._on_validation(steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: Dict[str, Any]) -> None:
        logger.info(
            f"report_metrics(group={group}, steps_completed={steps_completed}, metrics={metrics})"
        )
        prefix = {"training": "", "validation": "val_"}.get(group, f"{group}_")
        self._write(prefix, steps_completed, metrics)
        if group == "validation" and self._on_validation is not None:
            self._on_validation(steps_completed, metrics)

    def _write(self, prefix: str, step: int, metrics: Dict[str, Any]) -> None:
        if self._tensorboard_mode is not TensorboardMode.AUTO or self._dist.rank != 0:
            return
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self._tensorboard_path))
        for name, value in metrics.items():
            if is_numerical_scalar(value):
                tag = name if prefix and name.startswith(prefix) else prefix + name
                self._writer.add_scalar(f"Determined/{tag}", float(value), step)
        self._writer.flush()

    def get_tensorboard_path(self) -> pathlib.Path:
        return self._tensorboard_path

    def upload_tensorboard_files(
        self,
        selector: Callable[[pathlib.Path], bool] = lambda _: True,
        mangler: Callable[[pathlib.Path, int], pathlib.Path] = lambda p, __: p,
    ) -> None:
        """Nothing to upload: the files stay in ``get_tensorboard_path()``."""
        logger.info("upload_tensorboard_files()")

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        logger.info(f"report_early_exit({reason})")

    def report_progress(self, progress: float) -> None:
        logger.info(f"report_progress with progress={progress}")

    def get_experiment_best_validation(self) -> Optional[float]:
        """The best ``searcher.metric`` value any trial of the experiment reported so far, as
        Determined's master answers; None outside a search (no other trials, as in
        Determined's local mode), and before any validation; on every rank."""
        return self._best_validation() if self._best_validation is not None else None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


DummyTrainContext = TrainContext

__all__ = ["DummyTrainContext", "TrainContext"]
