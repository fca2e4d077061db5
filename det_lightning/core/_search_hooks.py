"""How a Core API loop in a search's trial reaches the search, without the Core API knowing
searches: the command that starts the trial (``det-lightning run``, inside
``_runner.search._child.reporting_to_search``) registers a maker here, and ``core.init()``
asks it for the chief's ``SearchHook``::

    core_context.train.report_validation_metrics(steps, metrics)   -> hook.validation(...)
    core_context.preempt.should_preempt()                          -> hook.stop_requested()
    core_context.train.get_experiment_best_validation()            -> hook.best_validation()
                                            (on another rank:          -> best())
    core_context.searcher.operations()                             one op of hook.length

As Determined 0.38's master does for a Core API trial: the searcher metric of each validation
ranks the trial at ASHA's rungs (its progress is the validation's ``time_metric`` value, e.g.
``epochs``), and a trial ASHA stops is told so through ``should_preempt()``.
"""

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol


class SearchHook(Protocol):
    """The chief's link to the search its trial belongs to."""

    length: Optional[int]  # the searcher's length for the trial, in its time metric's units

    def validation(self, steps_completed: int, metrics: Dict[str, Any]) -> None:
        """A validation the loop reported."""

    def stop_requested(self) -> bool:
        """Whether the search stopped the trial (ASHA ranked it out at a rung)."""

    def best_validation(self) -> Optional[float]:
        """The best searcher metric the experiment's trials reported so far, or None."""


MakeHook = Callable[[], Optional[SearchHook]]
BestValidation = Callable[[], Optional[float]]
_MAKERS: List[MakeHook] = []
_BEST: List[BestValidation] = []


@contextlib.contextmanager
def core_search(make: MakeHook, best: BestValidation) -> Iterator[None]:
    """Inside the block, ``core.init()`` on the chief links its loop to ``make()``'s hook, and
    on the other ranks answers ``get_experiment_best_validation()`` with ``best()`` (Determined
    asks its master from any rank)."""
    _MAKERS.append(make)
    _BEST.append(best)
    try:
        yield
    finally:
        _MAKERS.remove(make)
        _BEST.remove(best)


def search_hook() -> Optional[SearchHook]:
    """The hook of the innermost ``core_search`` block, or None outside any."""
    return _MAKERS[-1]() if _MAKERS else None


def best_validation() -> Optional[BestValidation]:
    """A rank other than the chief's reader of the experiment's best validation, or None
    outside any ``core_search`` block."""
    return _BEST[-1] if _BEST else None


__all__ = ["SearchHook", "best_validation", "core_search", "search_hook"]
