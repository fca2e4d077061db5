"""Preemption: SIGTERM or SIGINT during ``fit()`` ends the run with a checkpoint to resume from.

While ``Trainer.fit()`` runs (handlers are installed from the main thread only, and the previous
handlers are back when ``fit()`` returns or raises)::

    1st SIGTERM/SIGINT   finish the current batch (and a validation already running),
                         write a checkpoint, run on_trial_shutdown(), then
                         fit() raises errors.TrialPreempted: a SystemExit, so an uncaught one
                         ends the process with status 75 (EX_TEMPFAIL, "try again")
    2nd signal           the signal's default action: the process dies at once. A checkpoint
                         being written stays a ``.<uuid>.partial`` directory, which resuming
                         ignores and deletes; the last complete checkpoint is untouched.

``context.set_stop_requested(True)`` stops the same way from user code, but ``fit()`` then
returns normally: the trial chose to stop, nothing needs to run again.

Lightning has its own SIGTERM handling (``trainer.received_sigterm``), which raises
``SIGTERMException`` mid-batch or mid-validation; for our runs it is switched off and this
module takes its place. With several processes a signal on any rank stops every rank after
the same batch.

Resuming: ``fit(latest_checkpoint="latest")``, or the environment variable
``DET_LIGHTNING_LATEST_CHECKPOINT=latest`` when ``fit()`` is given no ``latest_checkpoint``,
so a job script can be requeued unchanged; the first run, with no checkpoint yet, starts fresh
(``resume.plan_resume``). A checkpoint found that way is never fully unpickled: only one the
user named (a path or UUID, in ``fit()`` or in the variable) may be.
"""

import logging
import os
import pathlib
import signal
import threading
from types import FrameType
from typing import Any, Callable, Dict, Optional

from det_lightning import errors

logger = logging.getLogger("det_lightning.core")

LATEST_CHECKPOINT_ENV = "DET_LIGHTNING_LATEST_CHECKPOINT"
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalWatcher:
    """Turns the first SIGTERM/SIGINT into a stop request; use as ``with SignalWatcher(...)``.

    Calling the watcher answers "should the run stop?" (``ScheduleCallback``'s ``stop_signal``).

    Args:
        distributed: the context's ``DistributedContext``; with several processes the answer is
            agreed across ranks (a collective, so every rank must call it at the same points).
        also: another stop signal to honour (or None).
    """

    def __init__(self, distributed: Any, also: Optional[Callable[[], bool]] = None) -> None:
        self.distributed = distributed
        self.also = also
        self.received: Optional[int] = None
        self._previous: Dict[int, Any] = {}
        self._pid = os.getpid()

    def __enter__(self) -> "SignalWatcher":
        self._pid = os.getpid()
        if threading.current_thread() is not threading.main_thread():
            logger.info("fit() is not running in the main thread: SIGTERM/SIGINT are not handled.")
            return self
        for signum in HANDLED_SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            # None: a handler not installed from Python, which cannot be put back.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        # Forked DataLoader workers inherit this handler (torch replaces it for SIGTERM only):
        # on Ctrl+C, which reaches the whole process group, they keep serving batches, silently,
        # until the main process stops them.
        speak = os.getpid() == self._pid
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = signum
            if speak:
                logger.warning(
                    f"Received {name}: finishing the current batch, then saving a checkpoint and "
                    f"stopping. Send {name} again to exit at once."
                )
            return
        if speak:
            logger.warning(
                f"Received {name} again: exiting at once. The last complete checkpoint is kept; "
                "a checkpoint being written is discarded."
            )
            for handler in logging.getLogger().handlers + logger.handlers:
                handler.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __call__(self, local: bool = False) -> bool:
        """Whether to stop: a signal arrived, ``local`` (this rank's own request) is set, or,
        with several processes, either holds on any rank."""
        requested = local or self.received is not None
        requested = requested or bool(self.also is not None and self.also())
        if self.distributed.size > 1:
            return self.distributed.any_rank(requested)  # every batch: keep it one tiny all-reduce
        return requested

    def raise_if_received(self, checkpoint: Optional[pathlib.Path], root: pathlib.Path) -> None:
        """After a signal, ends ``fit()`` with ``TrialPreempted``; the log says how to resume."""
        received = [self.received]
        if self.distributed.size > 1:
            # Every rank stopped at the same batch, whichever got the signal; they leave together,
            # after the chief's checkpoint and everyone's on_trial_shutdown (Lightning's launcher
            # kills the other processes as soon as one exits with an error status).
            received = self.distributed.allgather(self.received)
        signums = [signum for signum in received if signum is not None]
        if not signums:
            return
        name = signal.Signals(signums[0]).name
        saved = f"The last checkpoint is {checkpoint}." if checkpoint else "No checkpoint exists."
        message = (
            f"Stopped by {name}. {saved} To continue, run again with the same checkpoint "
            f"directory ({root}) and Trainer.fit(..., latest_checkpoint='latest'), or set "
            f"{LATEST_CHECKPOINT_ENV}=latest. Exiting with status "
            f"{errors.TrialPreempted.EXIT_CODE}."
        )
        if self.distributed.rank == 0:
            logger.warning(message)
        raise errors.TrialPreempted(message, checkpoint=str(checkpoint) if checkpoint else None)


def supersede_lightning_signals(trainer: Any) -> None:
    """Keeps Lightning from installing its SIGTERM handler for ``trainer``: ours decide when
    to stop (after the batch, with a checkpoint) instead of its ``SIGTERMException``."""
    # Lightning >= 2.6 also broadcasts its SIGTERM flag from rank 0 before every batch and reads
    # it back with .item(). Its handler is gone, so the flag never rises: the collective is pure
    # cost. SignalWatcher's agreement (ScheduleCallback) replaces it.
    from det_lightning.adapters import internals

    internals.supersede_signals(trainer, _no_lightning_handlers, _no_sigterm_broadcast)


def _no_sigterm_broadcast() -> None:
    """Lightning's per-batch SIGTERM broadcast, replaced: no collective."""


def _no_lightning_handlers() -> None:
    """Lightning's ``register_signal_handlers``, replaced: ``SignalWatcher`` handles signals."""
