"""``core.SearcherContext`` and ``core.PreemptContext`` in local mode, as Determined's: one
searcher operation of length 1, and preemption that never comes (in a search's trial: the
searcher's length, and a stop once ASHA ranks the trial out, ``_search_hooks``). Both keep Determined's
synchronization (the chief broadcasts), so code that runs under torchrun behaves the same."""

import logging
import warnings
from typing import Any, Callable, Iterator, Optional

from det_lightning.core._distributed import DistributedContext
from det_lightning.core._modes import PreemptMode, SearcherMode, Unit

logger = logging.getLogger("det_lightning.core")


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
    """``should_preempt()`` is always False (nothing preempts a local run)."""

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

    def start(self) -> "PreemptContext":
        if self._started:
            raise RuntimeError("you cannot call PreemptContext.start() multiple times")
        self._started = True
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> "PreemptContext":
        return self.start()

    def __exit__(self, *_: Any) -> None:
        pass

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self._started:
            raise RuntimeError(
                "you cannot call PreemptContext.should_preempt() before PreemptContext.start()"
            )
        ask_chief = self._preempt_mode == PreemptMode.WorkersAskChief
        if self._dist.rank == 0:
            stop = bool(self._stop_requested and self._stop_requested())
            if ask_chief:
                self._dist.broadcast(stop)
            return stop
        elif self._preempt_mode == PreemptMode.ChiefOnly:
            raise RuntimeError(
                "PreemptContext was configured with preempt_mode=ChiefOnly but .should_preempt() "
                f"was called from non-chief worker of rank={self._dist.rank}"
            )
        elif ask_chief:
            return bool(self._dist.broadcast(None))  # the chief's answer
        return False

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
