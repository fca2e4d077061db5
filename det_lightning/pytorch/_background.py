"""Checkpoint writes that do not stall training: one write at a time, in a background thread.

The training thread takes the checkpoint's state (``snapshot``: a copy of every tensor, so the
next optimizer step cannot change what is written), hands the write to ``BackgroundWriter`` and
trains on; the thread serializes, writes, fsyncs and renames (``CheckpointStore.stage``). Whoever
needs the checkpoint complete waits for it::

    writer.submit(job)          # waits for the write before it first: one write at a time
    writer.finished()           # cheap; True once the write in flight has ended (any batch)
    writer.wait()               # joins it; the job's own exception is raised here, once

Why a thread of its own per write, never a daemon: it is always joined (the next checkpoint,
``fit()``'s end, an exception), so none is left for the interpreter's finalization, and a
process group is never destroyed under a write.
"""

import copy
import threading
from typing import Any, Callable, Optional

from det_lightning._switch import switch

SYNC_CHECKPOINTS_ENV = "DET_LIGHTNING_SYNC_CHECKPOINTS"


def sync_checkpoints(option: Optional[bool] = None) -> bool:
    """Whether checkpoints are written in the training thread (training waits for each write):
    ``Trainer(sync_checkpoints=...)`` when given, else ``$DET_LIGHTNING_SYNC_CHECKPOINTS``; by
    default they are written in the background.

    >>> sync_checkpoints(True), sync_checkpoints(False)
    (True, False)
    """
    return switch(
        option,
        "sync_checkpoints",
        SYNC_CHECKPOINTS_ENV,
        on="write checkpoints in the training thread",
        off="in the background, the default",
    )


def snapshot(state: Any) -> Any:
    """A copy of ``state`` that training can no longer change: every tensor's storage copied
    once (tensors that shared a storage still share the copy, and Python objects met twice
    are one object twice), so ``torch.save`` writes the same records as for ``state``.

    A CUDA tensor's copy stays on its device (the device-to-host copy happens in the writer,
    as in a synchronous ``torch.save``).
    """
    return copy.deepcopy(state)


class BackgroundWriter:
    """Runs one write job at a time in a thread of its own."""

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def submit(self, job: Callable[[], None]) -> None:
        """Starts ``job`` in the background, after the write in flight (whose error, if any,
        is raised here instead)."""
        self.wait()
        self._thread = threading.Thread(
            target=self._run, args=(job,), name="det-lightning-checkpoint-write"
        )
        self._thread.start()

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as e:  # raised in the training thread by wait()
            self._error = e

    def in_flight(self) -> bool:
        """Whether a write was submitted and not yet waited for."""
        return self._thread is not None

    def finished(self) -> bool:
        """Whether a write was submitted and has ended (``wait`` then returns at once)."""
        thread = self._thread
        return thread is not None and not thread.is_alive()

    def wait(self) -> None:
        """Joins the write in flight, if any; raises the exception it ended with."""
        thread = self._thread
        if thread is None:
            return
        thread.join()
        self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
