"""``core.ExperimentalCoreContext``: linking the task to a checkpoint or a model version.

On a cluster these calls recorded, in the master's database, which checkpoint or model version
a task (batch inference, say) used, so that the task's metrics showed with it in the model
registry. There is no master or registry here: as in Determined's local mode
(``DummyExperimentalCoreContext``) they record nothing; the first call says so in the log."""

import logging
from typing import Any

logger = logging.getLogger("det_lightning.core")


class ExperimentalCoreContext:
    """``core_context.experimental``; see the module."""

    def __init__(self) -> None:
        self._said = False

    def _nothing_recorded(self, what: str) -> None:
        if not self._said:
            self._said = True
            logger.warning(
                f"{what}: nothing is recorded (linking a task to a checkpoint or model version "
                "is the master's model registry; there is none here). Report metrics with "
                "core_context.train.report_metrics()."
            )

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        self._nothing_recorded("report_task_using_checkpoint()")

    def report_task_using_model_version(self, model_version: Any) -> None:
        self._nothing_recorded("report_task_using_model_version()")


class DummyExperimentalCoreContext(ExperimentalCoreContext):
    """Determined's local-mode stand-in: the same (nothing is recorded)."""
