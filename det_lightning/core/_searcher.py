"""``core.SearcherContext`` and ``core.PreemptContext`` in local mode, as Determined's: one
searcher operation of length 1 (in a search's trial: the searcher's length, ``_search_hooks``),
and preemption on SIGTERM/SIGINT, where Determined's local mode has none (in a search's trial
also once ASHA ranks the trial out). Both keep Determined's synchronization (the chief
broadcasts), so code that runs under torchrun behaves the same."""

import logging
import signal
import threading
import warnings
from types import FrameType
from typing import Any, Callable, Dict, Iterator, Optional

from det_lightning.core._distributed import DistributedContext
from det_lightning.core._modes import PreemptMode, SearcherMode, Unit

logger = logging.getLogger("det_lightning.core")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SEARCH_STOP = "search"  # should_preempt()'s reason when ASHA ranked the trial out


class SearcherOperation:
    """One unit of work: train to ``length`` and call ``report_completed(metric)`` (chief)."""

    def __init__(self, length: int, is_chief: bool) -> None:
        self._length = length
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    def report_progress(self, length: float) -> None:
        if not self._is_chief:
            raise RuntimeError("you must only call op.report_progress() from the chief worker")
        if self._completed and length != self._length:
            raise RuntimeError("you must not call op.report_progress() after op.report_completed()")
        logger.info(f"progress report: {length}/{self._length}")

    def report_completed(self, searcher_metric: Any) -> None:
        if not self._is_chief:
            raise RuntimeError("you must only call op.report_completed() from the chief worker")
        if self._completed:
            raise RuntimeError("you may only call op.report_completed() once")
        self._completed = True
        logger.info(f"SearcherOperation Complete: searcher_metric={searcher_metric}")


class SearcherContext:
    """Yields one operation of length 1, as Determined's local mode does."""

    def __init__(self, dist: DistributedContext, length: int = 1) -> None:
        self._dist = dist
        self._length = length

    def operations(
        self,
        searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
        auto_ack: bool = True,
    ) -> Iterator[SearcherOperation]:
        warnings.warn(
            "SearcherContext.operations() was deprecated in Determined 0.38.0 and will be removed "
            "in a future version.  Instead, you should set your training length directly in your "
            "training code.",
            FutureWarning,
            stacklevel=2,
        )
        searcher_mode = SearcherMode(searcher_mode)
        ask_chief = searcher_mode == SearcherMode.WorkersAskChief
        if self._dist.rank == 0:
            op = SearcherOperation(self._length, True)
            if ask_chief:
                self._dist.broadcast(op.length)
            yield op
            if not op._completed:
                raise RuntimeError("you must call op.report_completed() on each operation")
            if ask_chief:
                self._dist.broadcast(None)
            return
        if not ask_chief:
            raise RuntimeError(
                "you cannot call searcher.operations(searcher_mode=ChiefOnly) from a non-chief "
                "worker."
            )
        while (length := self._dist.broadcast(None)) is not None:
            yield SearcherOperation(length, False)

    def acknowledge_out_of_ops(self) -> None:
        pass

    def get_configured_units(self) -> Optional[Unit]:
        return Unit.EPOCHS


class PreemptContext:
    """``should_preempt()``: True once the loop should stop and checkpoint. Determined's local
    mode never says so; here it does after SIGTERM or SIGINT (a scheduler's preemption, Ctrl+C)
    and, in a search's trial, once ASHA ranks the trial out.

    Signals, in the main thread, from ``start()`` to ``close()``::

        1st SIGTERM/SIGINT, once this rank has asked should_preempt()
                             its next should_preempt() is True (the chief's answer, broadcast,
                             under WorkersAskChief); when the loop returns, leaving
                             ``core.init()``'s block exits with status 75 (errors.TrialPreempted)
        a signal before the loop first asked, or a 2nd one
                             the signal's previous action (by default the process ends): a
                             loop that never asks is never held up

    A non-chief rank under ``ChiefOnly`` never asks (its chief does): it holds its first signal.
    """

    def __init__(
        self,
        dist: DistributedContext,
        preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
        *,
        stop_requested: Optional[Callable[[], bool]] = None,
    ) -> None:
        self._dist = dist
        self._preempt_mode = PreemptMode(preempt_mode)
        self._started = False
        # A search's trial: the chief is told to stop once ASHA ranks the trial out.
        self._stop_requested = stop_requested
        self._asked = dist.rank != 0 and self._preempt_mode == PreemptMode.ChiefOnly
        self.received: Optional[int] = None  # the signal this rank holds
        self.preempted_by: Optional[str] = None  # the signal's name, once the loop was told
        self._previous: Dict[int, Any] = {}

    def start(self) -> "PreemptContext":
        if self._started:
            raise RuntimeError("you cannot call PreemptContext.start() multiple times")
        self._started = True
        if threading.current_thread() is threading.main_thread():
            for number in HANDLED_SIGNALS:
                self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def close(self) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def __enter__(self) -> "PreemptContext":
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _on_signal(self, number: int, frame: Optional[FrameType]) -> None:
        name = signal.Signals(number).name
        if self.received is not None or not self._asked:
            # A second signal, or a loop that has not asked yet: what the signal did before.
            previous = self._previous.get(number, signal.SIG_DFL)
            self.close()
            if callable(previous):
                previous(number, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)
                signal.raise_signal(number)
            return
        self.received = number
        logger.warning(
            f"{name} received: should_preempt() is True from its next call; checkpoint and "
            "return then (another signal ends the process at once)."
        )

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self._started:
            raise RuntimeError(
                "you cannot call PreemptContext.should_preempt() before PreemptContext.start()"
            )
        self._asked = True
        ask_chief = self._preempt_mode == PreemptMode.WorkersAskChief
        if self._dist.rank == 0:
            reason = self._reason()
            if ask_chief:
                self._dist.broadcast(reason)
        elif self._preempt_mode == PreemptMode.ChiefOnly:
            raise RuntimeError(
                "PreemptContext was configured with preempt_mode=ChiefOnly but .should_preempt() "
                f"was called from non-chief worker of rank={self._dist.rank}"
            )
        elif ask_chief:
            reason = self._dist.broadcast(None)  # the chief's answer
        else:
            reason = self._reason()
        if isinstance(reason, str) and reason != SEARCH_STOP:
            self.preempted_by = reason
        return bool(reason)

    def _reason(self) -> Optional[str]:
        """Why this rank should stop: a signal's name, ``SEARCH_STOP``, or None."""
        if self.received is not None:
            return signal.Signals(self.received).name
        if self._stop_requested and self._stop_requested():
            return SEARCH_STOP
        return None

    def acknowledge_preemption_signal(self) -> None:
        pass


DummySearcherContext = SearcherContext
DummySearcherOperation = SearcherOperation
DummyPreemptContext = PreemptContext

__all__ = [
    "DummyPreemptContext",
    "DummySearcherContext",
    "DummySearcherOperation",
    "PreemptContext",
    "SearcherContext",
    "SearcherOperation",
]
