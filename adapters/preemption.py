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
the same batch: ranks agree on stopping (``StopAgreement``) at every period boundary and every
so many batches, never after every batch::

    after a batch, if stop_agreement_due(batches, reached, ranks, next_at):    # pytorch/_boundaries.py
        all-reduce (MAX) of [this rank wants to stop, proposed interval]       # CPU, gloo group
        stop = any rank wants to; next_at = batches + the largest proposal
    proposal = next_agreement_interval(time per batch, time the last agreement took)
             # ~0.2% of training time spent agreeing (an agreement on gloo costs about
             # as much CPU as an overhead-bound DDP step), a stop waits at most ~1 s of batches;
             # DET_LIGHTNING_STOP_AGREEMENT_INTERVAL=n fixes it at n batches

Resuming: ``fit(latest_checkpoint="latest")``, or the environment variable
``DET_LIGHTNING_LATEST_CHECKPOINT=latest`` when ``fit()`` is given no ``latest_checkpoint``,
so a job script can be requeued unchanged; the first run, with no checkpoint yet, starts fresh
(``resume.plan_resume``). A checkpoint found that way is never fully unpickled: only one the
user named (a path or UUID, in ``fit()`` or in the variable) may be.
"""

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, AbstractSet, Any, Callable, Dict, List, Mapping, Optional

from det_lightning import errors
from det_lightning._env import LATEST_CHECKPOINT_ENV, RESUME_ADVICE_ENV, SEARCH_ENV
from det_lightning.adapters import gloo_loop
from det_lightning.pytorch._boundaries import Boundary, next_agreement_interval, stop_agreement_due

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from det_lightning.core import DistributedContext
    from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning.pytorch")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalWatcher:
    """Turns the first SIGTERM/SIGINT into a stop request; use as ``with SignalWatcher(...)``.

    Calling the watcher answers "should this process stop?" (``StopAgreement`` asks the rest).

    Args:
        distributed: the context's ``DistributedContext``.
    """

    def __init__(self, distributed: "DistributedContext") -> None:
        self.distributed = distributed
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
                # Ctrl+C reaches every rank: the chief says it for the job, the others only at
                # INFO (kept to themselves, _job_processes), as the stop is agreed by all.
                level = logging.WARNING if self.distributed.rank == 0 else logging.INFO
                logger.log(
                    level,
                    f"Received {name}: finishing the current batch, then saving a checkpoint and "
                    f"stopping. Send {name} again to exit at once.",
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
        """Whether this process should stop: a signal arrived, or ``local`` (this rank's own
        request) is set. No collective: ``StopAgreement`` asks the other ranks."""
        return local or self.received is not None

    def raise_if_received(
        self, checkpoint: Optional["CheckpointStore"], root: "CheckpointStore"
    ) -> None:
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
        got = [str(rank) for rank, signum in enumerate(received) if signum is not None]
        if len(got) < len(received):  # not every rank (a signal sent to one process)
            name += f" (received by rank{'s' if len(got) > 1 else ''} {', '.join(got)})"
        saved = f"The last checkpoint is {checkpoint}." if checkpoint else "No checkpoint exists."
        # det-lightning experiment says how its trials continue (a search: rerun it).
        advice = os.environ.get(RESUME_ADVICE_ENV) or (
            f"To continue, run again with the same checkpoint directory ({root}) and "
            f"Trainer.fit(..., latest_checkpoint='latest'), or set {LATEST_CHECKPOINT_ENV}=latest."
        )
        # The advice last: it may end with a command, to copy without a full stop after it.
        # A search's trial leaves its exit status to the command's last line, which may differ
        # (1 after the experiment's cancel or pause, whose SIGTERM this is).
        status = (
            ""
            if os.environ.get(SEARCH_ENV)
            else f" Exiting with status {errors.TrialPreempted.EXIT_CODE}."
        )
        message = f"Stopped by {name}. {saved}{status} {advice}"
        if self.distributed.rank == 0:
            logger.warning(message)  # the job's one line about it (the chief's)
        where = str(checkpoint) if checkpoint else None
        raise errors.TrialPreempted(message, checkpoint=where, reported=True)


STOP_AGREEMENT_ENV = "DET_LIGHTNING_STOP_AGREEMENT_INTERVAL"
# The first agreement comes after this many batches (or at an earlier period boundary); the
# timings it brings set the interval after it.
FIRST_AGREEMENT = 16


class StopAgreement:
    """Whether to stop after a batch, the same answer on every rank (see the module docstring).

    Args:
        distributed: the trial's ``DistributedContext``.
        wants_stop: ``wants_stop(local)``: whether this process wants to stop (``local``: the
            trial asked, ``set_stop_requested(True)``); no collective.
        environ: where ``DET_LIGHTNING_STOP_AGREEMENT_INTERVAL`` is read.
    """

    def __init__(
        self,
        distributed: "DistributedContext",
        wants_stop: Callable[[bool], bool],
        environ: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.distributed = distributed
        self.wants_stop = wants_stop
        self.fixed = _fixed_interval((os.environ if environ is None else environ))
        self.next_at = self.fixed or FIRST_AGREEMENT
        self.agreements = 0
        self._side_group: Any = None  # a gloo group of our own, when training is not on gloo
        self._group_chosen = False
        self._last = (0, time.perf_counter())  # batches trained, time: at the last agreement
        self._cost = 0.0  # seconds the last agreement took

    def due(self, batches_trained: int, reached: AbstractSet[Boundary]) -> bool:
        return stop_agreement_due(batches_trained, reached, self.distributed.size, self.next_at)

    def after_batch(
        self, batches_trained: int, reached: AbstractSet[Boundary], local: bool
    ) -> bool:
        """Whether to stop after this batch: ``agree`` when an agreement is ``due`` (with one
        process, after every batch: its own wish, no collective), else no."""
        if self.distributed.size == 1:  # the shortcut of stop_agreement_due, on the hot path
            return bool(self.wants_stop(local))
        if not self.due(batches_trained, reached):
            return False
        return self.agree(batches_trained, local)

    def agree(self, batches_trained: int, local: bool) -> bool:
        """Whether any rank wants to stop; with several processes a collective, so every rank
        calls it after the same batches (``due``) whatever its own flag says."""
        wanted = bool(self.wants_stop(local))
        if self.distributed.size == 1:
            return wanted
        started = time.perf_counter()
        since, then = self._last
        per_batch = (started - then) / max(1, batches_trained - since)
        # The first agreement's cost is not known before it runs: keep the first interval once.
        adapted = next_agreement_interval(per_batch, self._cost) if self.agreements else None
        proposal = self.fixed or adapted or FIRST_AGREEMENT
        stop, interval = self._all_reduce_max(int(wanted), proposal)
        done = time.perf_counter()
        self._cost, self._last = done - started, (batches_trained, done)
        self.next_at = batches_trained + interval
        self.agreements += 1
        return bool(stop)

    def _all_reduce_max(self, *values: int) -> List[int]:
        import torch
        import torch.distributed as dist

        if not self._group_chosen:
            # On the CPU, whatever the training backend: no GPU sync. Every rank gets here at
            # the same agreement, as new_group requires. On gloo the default group serves, by
            # None: a group object kept here would outlive destroy_process_group() (see close).
            if dist.get_backend() != "gloo":
                self._side_group = dist.new_group(backend="gloo")
                gloo_loop.lower_loop_priority()  # the new group's socket thread
            self._group_chosen = True
        tensor = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._side_group)
        return [int(v) for v in tensor.tolist()]

    def close(self) -> None:
        """Destroys the gloo side group, if the agreement made one; call it when ``fit()`` ends.

        ``destroy_process_group()`` only forgets a group: its gloo worker threads run until the
        last reference to it goes. One left here, inside the Lightning trainer's reference
        cycles, lives into the interpreter's finalization. A worker still releasing its last
        collective's tensors then needs the GIL; Python ends such a thread with pthread_exit,
        whose unwinding through a noexcept destructor calls std::terminate: SIGABRT ("terminate
        called without an active exception") in a process that had finished its work.
        """
        group, self._side_group = self._side_group, None
        self._group_chosen = False
        if group is None:
            return
        import torch.distributed as dist

        if dist.is_initialized():  # else it went with the default group
            try:
                dist.destroy_process_group(group)
            except ValueError:  # the default group was replaced since: it went with the old one
                pass


def _fixed_interval(environ: Mapping[str, str]) -> Optional[int]:
    """``DET_LIGHTNING_STOP_AGREEMENT_INTERVAL``: agree every that many batches (None: adapt).

    >>> _fixed_interval({"DET_LIGHTNING_STOP_AGREEMENT_INTERVAL": "16"}), _fixed_interval({})
    (16, None)
    """
    text = environ.get(STOP_AGREEMENT_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"{STOP_AGREEMENT_ENV}={text!r}: expected a whole number of batches >= 1, or unset "
            "to let det_lightning choose (about 1% of training time, at most ~1 s of batches)."
        )
    return int(text)


def supersede_lightning_signals(trainer: "pl.Trainer") -> None:
    """Keeps Lightning from installing its SIGTERM handler for ``trainer``: ours decide when
    to stop (after the batch, with a checkpoint) instead of its ``SIGTERMException``."""
    # Lightning >= 2.6 also broadcasts its SIGTERM flag from rank 0 before every batch and reads
    # it back with .item(). Its handler is gone, so the flag never rises: the collective is pure
    # cost. SignalWatcher's agreement (ScheduleCallback) replaces it.
    from det_lightning.adapters.lightning import internals

    internals.supersede_signals(trainer, _no_lightning_handlers, _no_sigterm_broadcast)


def _no_sigterm_broadcast() -> None:
    """Lightning's per-batch SIGTERM broadcast, replaced: no collective."""


def _no_lightning_handlers() -> None:
    """Lightning's ``register_signal_handlers``, replaced: ``SignalWatcher`` handles signals."""
