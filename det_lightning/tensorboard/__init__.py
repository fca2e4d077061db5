"""``determined.tensorboard``: the names trials import from it."""

from det_lightning.tensorboard import metric_writers

__all__ = ["metric_writers"]
