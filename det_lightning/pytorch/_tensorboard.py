"""``TrialSummaryWriter``: a ``SummaryWriter`` that writes into the trial's current TensorBoard run.

A trial usually asks for its writer in ``__init__`` (``context.get_tensorboard_writer()``, or
Determined's old ``TorchWriter()``), before ``Trainer(..., tensorboard_dir=...)`` or the
experiment runner has said where the run's files go. A plain ``SummaryWriter`` would fix its
directory (and create an events file there) at that moment, so the trial's own scalars would
land in one run and the trainer's metrics in another. This writer opens its file only at the
first write, in the directory the context names then, and follows the context if the
directory changes between writes (what it wrote before stays where it was written).
"""

import pathlib
from typing import Any, Callable

from torch.utils.tensorboard import SummaryWriter


class TrialSummaryWriter(SummaryWriter):
    """A ``torch.utils.tensorboard.SummaryWriter`` whose directory is ``directory()`` at the
    time of each write.

    Args:
        directory: returns the trial's TensorBoard run directory.
        **kwargs: ``SummaryWriter``'s other arguments (``flush_secs``, ``max_queue``, ...).
    """

    def __init__(self, directory: Callable[[], pathlib.Path], **kwargs: Any) -> None:
        self._directory = directory
        self._opened = False  # SummaryWriter.__init__ opens its file; not yet
        super().__init__(log_dir=str(directory()), **kwargs)
        self._opened = True

    def _get_file_writer(self) -> Any:  # every SummaryWriter write goes through this
        if not self._opened:
            return None
        current = str(self._directory())
        if self.file_writer is not None and current != self.log_dir:
            self.close()  # flushes what went to the earlier directory
        self.log_dir = current
        return super()._get_file_writer()

    def get_logdir(self) -> str:
        return str(self._directory())
