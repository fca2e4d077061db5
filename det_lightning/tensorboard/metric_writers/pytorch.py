"""``determined.tensorboard.metric_writers.pytorch.TorchWriter``, writing to the trial's run.

Determined deprecated ``TorchWriter`` in favour of ``context.get_tensorboard_writer()``; trials
written for older versions still create one in ``__init__``::

    from determined.tensorboard.metric_writers.pytorch import TorchWriter
    self.logger = TorchWriter()
    self.logger.writer.add_scalar("my_metric", value, batch_idx)
"""

import warnings
from typing import Any, Union

import numpy as np

from det_lightning import errors


class TorchWriter:
    """Determined's ``TorchWriter``: ``writer`` is a ``SummaryWriter`` on the trial's TensorBoard
    run (the directory the trainer's own metrics go to).

    Raises:
        det_lightning.errors.InternalException: created outside ``pytorch.init()``.
    """

    def __init__(self) -> None:
        warnings.warn(
            "TorchWriter() is deprecated (as in Determined); use "
            "context.get_tensorboard_writer(), which writes to the same run.",
            FutureWarning,
            stacklevel=2,
        )
        from det_lightning.pytorch._trainer import active_context

        context = active_context()
        if context is None:
            raise errors.InternalException(
                "TorchWriter() was created outside `with pytorch.init(...) as context:`; it "
                "writes to that trial's TensorBoard run, so create it in the trial's __init__."
            )
        self.writer: Any = context.engine.new_tensorboard_writer()

    def add_scalar(self, name: str, value: Union[int, float, np.number], step: int) -> None:
        self.writer.add_scalar(name, value, step)

    def reset(self) -> None:
        """Flushes and closes the file; the next write opens a new one."""
        self.writer.close()

    def flush(self) -> None:
        self.writer.flush()
