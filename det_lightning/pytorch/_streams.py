"""The stream operations and argument checks that ``samplers.py``'s classes are made of.

Pure functions over iterables: each sampler class checks its arguments with one of the
``check_*`` functions and yields one of these streams from ``__iter__``, so the index and the
batch variant of a sampler share one definition of what they do.

>>> list(drop_first(every_nth(range(10), num_workers=3, rank=1), skip=1))
[4, 7]
>>> shard_length(10, num_workers=3, rank=1)
3
"""

import operator
from typing import Any, Iterable, Iterator, List, Sized, Tuple, cast

import numpy as np


def length_of(wrapped: object, wrapper: str) -> int:
    """``len(wrapped)``, or a TypeError that says which wrapper needed it."""
    if not hasattr(wrapped, "__len__"):
        raise TypeError(
            f"{wrapper} needs the length of the sampler it wraps, but the given "
            f"{type(wrapped).__name__} object has no __len__."
        )
    return len(cast(Sized, wrapped))


def as_int(value: Any, name: str, wrapper: str) -> int:
    """``value`` as a plain int; bools, floats and strings are rejected with a TypeError."""
    if isinstance(value, bool):
        raise TypeError(f"{wrapper}: {name} must be an integer, got the bool {value!r}.")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{wrapper}: {name} must be an integer, got {value!r} of type {type(value).__name__}."
        ) from None


def check_shard(num_workers: Any, rank: Any, wrapper: str) -> Tuple[int, int]:
    """Validates a (num_workers, rank) pair: at least one worker, and 0 <= rank < num_workers."""
    shards = as_int(num_workers, "num_workers", wrapper)
    index = as_int(rank, "rank", wrapper)
    if shards < 1:
        raise ValueError(
            f"{wrapper}: num_workers is the number of shards and must be at least 1, "
            f"got num_workers={shards}."
        )
    if index < 0:
        raise ValueError(f"{wrapper}: rank must be non-negative, got rank={index}.")
    if index >= shards:
        raise ValueError(
            f"{wrapper}: rank must be less than num_workers (ranks count from 0), "
            f"got rank={index} with num_workers={shards}; expected 0 <= rank < {shards}."
        )
    return shards, index


def check_skip(skip: Any, wrapper: str) -> int:
    count = as_int(skip, "skip", wrapper)
    if count < 0:
        raise ValueError(f"{wrapper}: skip must be non-negative, got skip={count}.")
    return count


def repeat_forever(wrapped: Iterable[Any], wrapper: str) -> Iterator[Any]:
    """Yields ``wrapped`` pass after pass; fails, rather than spin forever, on an empty pass."""
    while True:
        empty = True
        for item in wrapped:
            empty = False
            yield item
        if empty:
            raise RuntimeError(
                f"{wrapper}: the wrapped sampler yielded nothing in a whole pass, so there is "
                "nothing to repeat (is the dataset empty, or smaller than one batch with "
                "drop_last=True?)."
            )


def every_nth(wrapped: Iterable[Any], num_workers: int, rank: int) -> Iterator[Any]:
    """The items at positions ``rank``, ``rank + num_workers``, ... of the stream."""
    for position, item in enumerate(wrapped):
        if position % num_workers == rank:
            yield item


def shard_length(total: int, num_workers: int, rank: int) -> int:
    """How many of ``total`` items a round-robin deal over ``num_workers`` gives to ``rank``."""
    return total // num_workers + (1 if total % num_workers > rank else 0)


END = object()


def drop_first(wrapped: Iterable[Any], skip: int) -> Iterator[Any]:
    """The stream without its first ``skip`` items (empty when it is shorter than that)."""
    iterator = iter(wrapped)
    for _ in range(skip):
        if next(iterator, END) is END:
            return
    yield from iterator


def shuffled(items: List[Any], rng: np.random.RandomState) -> List[Any]:
    """A new list with ``items`` in the order of one Fisher-Yates shuffle drawn from ``rng``.

    ``RandomState.permutation(n)`` draws exactly what ``RandomState.shuffle`` draws for a list of
    ``n`` items, so the order (and the state ``rng`` is left in) is the same as shuffling in place.
    """
    order = rng.permutation(len(items))
    return [items[position] for position in order]
