"""Validation metric reduction: ``Reducer`` for per-batch metrics, ``MetricReducer`` for custom ones.

Cross-rank reduction takes an all-gather function, so it is tested with a fake one per thread and
runs over ``torch.distributed`` in a real job. Each rank reduces its own batches, then the chief
combines the per-rank results: AVG weights each rank by its number of batches, so the result is
the mean over all batches, whichever rank saw them.
"""

import abc
import enum
import functools
import itertools
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar, Union

import numpy as np

from det_lightning import errors


class Reducer(enum.Enum):
    """How per-batch values of a validation metric combine into one number."""

    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


def simple_reduce(
    reducer: Reducer, values: Any, num_batches: Optional[Sequence[int]] = None
) -> Any:
    """Reduces stacked per-batch values with ``reducer`` into one number, over every element as
    Determined does (a metric of shape ``(1,)`` or ``(batch, k)`` per batch gives a scalar);
    ``num_batches`` weights AVG.

    >>> float(simple_reduce(Reducer.AVG, np.array([1.0, 3.0]), [1, 3]))
    2.5
    >>> simple_reduce(Reducer.SUM, np.array([[1], [2]])).shape
    ()
    """
    if reducer is Reducer.AVG:
        if num_batches is not None and len(num_batches) != len(values):
            raise RuntimeError(
                f"Lengths of metrics and num_batches are not equal: {len(values)} != "
                f"{len(num_batches)}."
            )
        return np.average(values, weights=num_batches)
    if reducer is Reducer.SUM:
        return np.sum(values)
    if reducer is Reducer.MAX:
        return np.max(values)
    if reducer is Reducer.MIN:
        return np.min(values)
    raise NotImplementedError(f"Unknown reducer {reducer!r}.")


def prepare_reducers(
    reducer: Union[Reducer, Mapping[str, Reducer]], keys: Sequence[str]
) -> Dict[str, Reducer]:
    """One ``Reducer`` per metric name, from ``evaluation_reducer()``'s answer.

    Raises:
        det_lightning.errors.InvalidExperimentException: a dict that does not name every metric,
            or a value that is not a ``Reducer`` (Determined's class for both).
    """
    if isinstance(reducer, Mapping):
        if set(keys) != set(reducer.keys()):
            raise errors.InvalidExperimentException(
                "Please provide a single evaluation reducer or provide a reducer for every "
                f"validation metric. Expected keys: {sorted(keys)}, provided keys: "
                f"{sorted(reducer.keys())}."
            )
        chosen = dict(reducer)
    else:
        chosen = {key: reducer for key in keys}
    for key, value in chosen.items():
        if not isinstance(value, Reducer):
            raise errors.InvalidExperimentException(
                f"evaluation_reducer() gave {value!r} for metric {key!r}: select a "
                "det_lightning.pytorch.Reducer (AVG, SUM, MAX or MIN) for reducing validation "
                "metrics, or use context.wrap_reducer() for a custom reduction."
            )
    return chosen


class MetricReducer(metaclass=abc.ABCMeta):
    """A custom metric, accumulated over batches on each rank and combined on the chief.

    Call ``context.wrap_reducer(reducer, name=...)`` in the trial's ``__init__``, feed it from
    ``train_batch``/``evaluate_batch`` with your own ``update`` method, and the trainer calls
    ``reset()`` before each workload, ``per_slot_reduce()`` on every rank at its end, and
    ``cross_slot_reduce(per_slot_metrics)`` with the list of every rank's result.
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Clears the accumulated state."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This rank's partial result (must be picklable)."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: List) -> Any:
        """Combines every rank's partial result into the metric (or a dict of metrics)."""


class _SimpleReducer(MetricReducer):
    """Wraps a function of the list of every value passed to ``update``, in a fixed order."""

    class _NotMetric:
        """The filler for a rank with fewer values (Determined's name: ``NOT_METRIC``)."""

    NOT_METRIC = _NotMetric()

    def __init__(self, fn: Callable[[List[Any]], Any]) -> None:
        self.fn = fn
        self.values: List[Any] = []

    def reset(self) -> None:
        self.values = []

    def update(self, value: Any) -> None:
        self.values.append(value)

    def per_slot_reduce(self) -> Any:
        return self.values

    def cross_slot_reduce(self, per_slot_metrics: List) -> Any:
        # Interleave ranks (rank 0's first value, rank 1's first value, ...), which is the order
        # Determined's sharding gives the underlying records.
        rows = itertools.zip_longest(*per_slot_metrics, fillvalue=self.NOT_METRIC)
        return self.fn([v for row in rows for v in row if v is not self.NOT_METRIC])


class _WrappedReducer:
    def __init__(
        self, reducer: MetricReducer, name: Optional[str], for_training: bool, for_validation: bool
    ) -> None:
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation

    def _call(self, what: str, fn: Callable[[], Any], detail: str = "") -> Any:
        try:
            return fn()
        except Exception as e:
            raise ValueError(
                f'reducer of type {type(self.reducer).__name__} for name="{self.name}" failed in '
                f"a call to {what}(){detail}"
            ) from e


def _check_reduced(wrapped: _WrappedReducer, reduced: Any) -> None:
    what = (
        f"The custom reduction function {wrapped.reducer.fn.__name__}()"
        if isinstance(wrapped.reducer, _SimpleReducer)
        else f"The custom reduction MetricReducer {type(wrapped.reducer).__name__}"
    )
    if wrapped.name is None and not isinstance(reduced, dict):
        raise TypeError(
            f"{what} was wrapped by wrap_reducer() with name=None but it returned a "
            f"{type(reduced).__name__}, not a dict. Set name=... to return a single metric, or "
            "return a dict mapping names to metrics."
        )
    if wrapped.name is not None and isinstance(reduced, dict):
        raise TypeError(
            f"{what} was wrapped by wrap_reducer() with name={wrapped.name!r} but it returned a "
            "dict. Leave name=None to return several metrics as a dict, or return one value."
        )


T = TypeVar("T", bound=MetricReducer)


class ReducerRegistry:
    """The context's custom reducers and how to reduce them across ranks.

    Args:
        allgather: returns every rank's value, in rank order, given this rank's value.
    """

    def __init__(self, allgather: Callable[[Any], List[Any]] = lambda x: [x]) -> None:
        self._wrapped: List[_WrappedReducer] = []
        self._allgather = allgather

    def wrap_reducer(
        self,
        reducer: Union[Callable, MetricReducer],
        name: Optional[str] = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        if any(w.reducer is reducer for w in self._wrapped):
            raise ValueError(
                f"wrap_reducer() was called twice with the same {type(reducer).__name__} object; "
                "wrap each reducer once."
            )
        if not isinstance(reducer, MetricReducer):
            if not callable(reducer):
                raise TypeError(
                    f"wrap_reducer() got a {type(reducer).__name__}: reducers must be a function "
                    "or a subclass of det_lightning.pytorch.MetricReducer."
                )
            reducer = _SimpleReducer(reducer)
        self._wrapped.append(_WrappedReducer(reducer, name, for_training, for_validation))
        return reducer

    def reset_reducers(self) -> None:
        for wrapped in self._wrapped:
            wrapped._call("reset", wrapped.reducer.reset)

    def reduce_metrics(self, for_training: bool) -> Dict[str, Any]:
        """Runs ``per_slot_reduce`` here, gathers across ranks, and ``cross_slot_reduce``s.

        Every rank must call this (it is a collective); every rank gets the result.
        """
        active = [
            w for w in self._wrapped if (w.for_training if for_training else w.for_validation)
        ]
        if not active:
            return {}
        return self.cross_slot(self._allgather(self.per_slot(active)), active)

    def per_slot(self, active: Optional[List[_WrappedReducer]] = None) -> List[Any]:
        """This rank's ``per_slot_reduce()`` of each reducer of ``active`` (default: all)."""
        active = self._wrapped if active is None else active
        return [w._call("per_slot_reduce", w.reducer.per_slot_reduce) for w in active]

    def cross_slot(
        self, gathered: List[List[Any]], active: Optional[List[_WrappedReducer]] = None
    ) -> Dict[str, Any]:
        """The metrics: each reducer of ``active`` (default: all) ``cross_slot_reduce``d over
        ``gathered``, a ``per_slot`` list per slot."""
        active = self._wrapped if active is None else active
        metrics: Dict[str, Any] = {}
        for wrapped, gathered_slots in zip(active, zip(*gathered)):
            per_slot = list(gathered_slots)
            reduced = wrapped._call(
                "cross_slot_reduce",
                functools.partial(wrapped.reducer.cross_slot_reduce, per_slot),
                f" with per_slot_metrics={per_slot}",
            )
            _check_reduced(wrapped, reduced)
            if wrapped.name is None:
                metrics.update(reduced)
            else:
                metrics[wrapped.name] = reduced
        return metrics

    @property
    def wrapped(self) -> List[_WrappedReducer]:
        """The reducers, in the order they were wrapped."""
        return list(self._wrapped)
