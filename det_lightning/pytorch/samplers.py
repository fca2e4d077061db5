"""Composable index and batch samplers, compatible with ``determined.pytorch.samplers``.

Each class wraps another sampler (anything iterable; most also need ``len()``) and changes the
stream it yields: repeat it forever, keep one rank's share of it, drop its first items, or shuffle
it reproducibly from a seed. Class names, constructor arguments, ``len()`` and the exact index
sequences match Determined 0.38.1, so code written against ``determined.pytorch.samplers`` can
switch its import and see the same data in the same order.

The ``*BatchSampler`` classes work on batches (lists of indices), and the result can be handed to
``torch.utils.data.DataLoader(dataset, batch_sampler=...)``. Determined wraps a training loader's
batch sampler in this order, and so should you when you resume a run by hand::

    batches = BatchSampler(SequentialSampler(dataset), batch_size=8, drop_last=False)
    batches = ReproducibleShuffleBatchSampler(batches, seed)  # shuffle first: one pass per epoch
    batches = RepeatBatchSampler(batches)                     # an endless stream of epochs
    batches = DistributedBatchSampler(batches, size, rank)    # this rank's share of it
    batches = SkipBatchSampler(batches, batches_trained)      # resume where training stopped

Skipping last means the skip counts this rank's batches across every epoch already trained, and
the shuffle seen after a restart is the one the first run would have seen.

When a Trainer runs on several devices, build the loader with
``Trainer(use_distributed_sampler=False)``: otherwise Lightning tries to rebuild a custom batch
sampler as if it were a plain ``BatchSampler`` and fails.

Sharding an ``IterableDataset``
-------------------------------
None of these samplers apply to an ``IterableDataset``: a ``DataLoader`` refuses a sampler for
one, and nothing shards the stream for you. The usual bug is that every rank (and every loader
worker process on every rank) reads the whole stream, so the job trains on N copies of each record.
Shard it yourself: read the rank and the number of ranks when you build the dataset (in a trial,
``context.distributed.get_rank()`` and ``context.distributed.get_size()``), keep them as plain
ints, and in ``__iter__`` keep every record whose position falls to this rank and this loader
worker (``torch.utils.data.get_worker_info()`` is ``None`` when the loader has no workers):

>>> import itertools
>>> import torch
>>> class ShardedStream(torch.utils.data.IterableDataset):
...     def __init__(self, records, rank: int, size: int) -> None:
...         self.records, self.rank, self.size = records, rank, size
...     def __iter__(self):
...         info = torch.utils.data.get_worker_info()
...         workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
...         stride = self.size * workers  # readers across the whole job
...         first = self.rank * workers + worker  # this reader's place among them
...         return itertools.islice(iter(self.records), first, None, stride)
>>> [list(ShardedStream(range(10), rank, size=3)) for rank in range(3)]
[[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]

Shards may differ in length by one record. During training a rank that runs out early leaves the
others waiting in a collective, so make the training stream endless (or cut every shard to the
length of the shortest).
"""

from typing import Any, Iterable, Iterator, List

import numpy as np
import torch

from det_lightning.pytorch._streams import (
    check_shard,
    check_skip,
    drop_first,
    every_nth,
    length_of,
    repeat_forever,
    shard_length,
    shuffled,
)

__all__ = [
    "RepeatSampler",
    "RepeatBatchSampler",
    "DistributedSampler",
    "DistributedBatchSampler",
    "SkipSampler",
    "SkipBatchSampler",
    "ReproducibleShuffleSampler",
    "ReproducibleShuffleBatchSampler",
]


class RepeatSampler(torch.utils.data.Sampler[int]):
    """Yields the indices of another sampler over and over, one full pass after another.

    The stream never ends; ``len()`` is the length of one pass of the wrapped sampler. Each pass
    calls ``iter()`` on the wrapped sampler again, so a shuffling sampler reshuffles every pass.

    Args:
        sampler: The index sampler to repeat.

    Raises:
        RuntimeError: While iterating, if a whole pass of ``sampler`` yields nothing (Determined's
            version loops forever in that case).

    Example:
        >>> import itertools
        >>> list(itertools.islice(RepeatSampler(range(3)), 7))
        [0, 1, 2, 0, 1, 2, 0]
    """

    def __init__(self, sampler: Iterable[int]) -> None:
        self._sampler = sampler

    def __len__(self) -> int:
        return length_of(self._sampler, type(self).__name__)

    def __iter__(self) -> Iterator[int]:
        return repeat_forever(self._sampler, type(self).__name__)


class RepeatBatchSampler(torch.utils.data.BatchSampler):
    """Yields the batches of another batch sampler over and over, one full pass after another.

    The stream never ends; ``len()`` is the number of batches in one pass of the wrapped sampler.

    Args:
        batch_sampler: The batch sampler to repeat. Kept as the ``batch_sampler`` attribute.

    Raises:
        RuntimeError: While iterating, if a whole pass of ``batch_sampler`` yields no batch, e.g.
            a dataset smaller than one batch with ``drop_last=True`` (Determined's version loops
            forever in that case).

    Example:
        >>> import itertools
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> batches = BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=True)
        >>> list(itertools.islice(RepeatBatchSampler(batches), 3))
        [[0, 1], [2, 3], [0, 1]]
    """

    def __init__(self, batch_sampler: Iterable[List[int]]) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return length_of(self.batch_sampler, type(self).__name__)

    def __iter__(self) -> Iterator[List[int]]:
        return repeat_forever(self.batch_sampler, type(self).__name__)


class DistributedSampler(torch.utils.data.Sampler[int]):
    """Keeps one shard of another sampler's indices: every ``num_workers``-th, from ``rank``.

    Indices are dealt round-robin: the shard of ``rank`` holds positions ``rank``,
    ``rank + num_workers``, ``rank + 2 * num_workers``, ... of the wrapped stream. The shards of
    ranks ``0 .. num_workers - 1`` are disjoint and together hold every index once, and lower ranks
    get one index more when the total does not divide evenly.

    Unlike ``torch.utils.data.distributed.DistributedSampler``, this one neither shuffles nor pads
    the dataset: it is a building block that filters whatever sampler it wraps, which need not have
    a fixed length and may be endless (a :class:`RepeatSampler`).

    Args:
        sampler: The index sampler to shard.
        num_workers: The number of shards (the number of ranks), at least 1.
        rank: Which shard to keep, ``0 <= rank < num_workers``.

    Raises:
        TypeError: If ``num_workers`` or ``rank`` is not an integer.
        ValueError: If ``num_workers < 1`` or ``rank`` is outside ``[0, num_workers)``.
            Determined checks this only in :class:`DistributedBatchSampler`.

    Example:
        >>> [list(DistributedSampler(range(7), num_workers=3, rank=r)) for r in range(3)]
        [[0, 3, 6], [1, 4], [2, 5]]
        >>> len(DistributedSampler(range(7), num_workers=3, rank=2))
        2
    """

    def __init__(self, sampler: Iterable[int], num_workers: int, rank: int) -> None:
        self._sampler = sampler
        self._num_workers, self._rank = check_shard(num_workers, rank, type(self).__name__)

    def __len__(self) -> int:
        total = length_of(self._sampler, type(self).__name__)
        return shard_length(total, self._num_workers, self._rank)

    def __iter__(self) -> Iterator[int]:
        return every_nth(self._sampler, self._num_workers, self._rank)


class DistributedBatchSampler(torch.utils.data.BatchSampler):
    """Keeps one shard of another batch sampler's batches: every ``num_workers``-th, from ``rank``.

    Whole batches are dealt round-robin, as :class:`DistributedSampler` deals indices, so each
    rank trains on full per-rank batches and one step of all ranks together covers
    ``num_workers`` consecutive batches of the wrapped stream.

    When the wrapped sampler is finite and its batch count does not divide by ``num_workers``,
    ranks get different numbers of batches (see ``len()``). Wrap a :class:`RepeatBatchSampler`
    for training so that every rank always has a next batch.

    Args:
        batch_sampler: The batch sampler to shard. Kept as the ``batch_sampler`` attribute.
        num_workers: The number of shards (the number of ranks), at least 1. Kept as the
            ``num_workers`` attribute.
        rank: Which shard to keep, ``0 <= rank < num_workers``. Kept as the ``rank`` attribute.

    Raises:
        TypeError: If ``num_workers`` or ``rank`` is not an integer.
        ValueError: If ``num_workers < 1`` or ``rank`` is outside ``[0, num_workers)``.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> batches = BatchSampler(SequentialSampler(range(7)), batch_size=2, drop_last=False)
        >>> list(DistributedBatchSampler(batches, num_workers=2, rank=0))
        [[0, 1], [4, 5]]
        >>> list(DistributedBatchSampler(batches, num_workers=2, rank=1))
        [[2, 3], [6]]
    """

    def __init__(self, batch_sampler: Iterable[List[int]], num_workers: int, rank: int) -> None:
        self.batch_sampler = batch_sampler
        self.num_workers, self.rank = check_shard(num_workers, rank, type(self).__name__)

    def __len__(self) -> int:
        total = length_of(self.batch_sampler, type(self).__name__)
        return shard_length(total, self.num_workers, self.rank)

    def __iter__(self) -> Iterator[List[int]]:
        return every_nth(self.batch_sampler, self.num_workers, self.rank)


class SkipSampler(torch.utils.data.BatchSampler):
    """Drops the first ``skip`` indices of another sampler and yields the rest.

    Skipping past the end yields nothing. ``len()`` is the length of the wrapped sampler whatever
    the skip, as in Determined: the skip is meant to be applied once, over an endless
    (:class:`RepeatSampler`) stream, when resuming training.

    Prefer :class:`SkipBatchSampler` to resume training: Determined counts batches trained, not
    records, so a record-level skip can be computed reliably only when every batch has the same
    size.

    This class derives from ``BatchSampler`` (although it yields indices) because Determined's does,
    so ``isinstance`` checks answer as they do for Determined's class.

    Args:
        sampler: The index sampler to skip into.
        skip: How many indices to drop, at least 0.

    Raises:
        TypeError: If ``skip`` is not an integer.
        ValueError: If ``skip`` is negative (Determined treats a negative skip as 0).

    Example:
        >>> list(SkipSampler(range(5), skip=2)), len(SkipSampler(range(5), skip=2))
        ([2, 3, 4], 5)
        >>> list(SkipSampler(range(5), skip=9))
        []
    """

    def __init__(self, sampler: Iterable[int], skip: int) -> None:
        self._sampler = sampler
        self._skip = check_skip(skip, type(self).__name__)

    def __len__(self) -> int:
        return length_of(self._sampler, type(self).__name__)

    def __iter__(self) -> Iterator[Any]:
        return drop_first(self._sampler, self._skip)


class SkipBatchSampler(torch.utils.data.BatchSampler):
    """Drops the first ``skip`` batches of another batch sampler and yields the rest.

    Skipping past the end yields nothing. ``len()`` is the number of batches in the wrapped
    sampler whatever the skip, as in Determined: the skip is meant to be applied once, to the
    endless stream of a rank, to resume training after ``skip`` batches of that rank.

    Args:
        batch_sampler: The batch sampler to skip into. Kept as the ``batch_sampler`` attribute.
        skip: How many batches to drop, at least 0. Kept as the ``skip`` attribute.

    Raises:
        TypeError: If ``skip`` is not an integer.
        ValueError: If ``skip`` is negative (Determined treats a negative skip as 0).

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> batches = BatchSampler(SequentialSampler(range(7)), batch_size=3, drop_last=False)
        >>> list(SkipBatchSampler(batches, skip=1)), len(SkipBatchSampler(batches, skip=1))
        ([[3, 4, 5], [6]], 3)
    """

    def __init__(self, batch_sampler: Iterable[List[int]], skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = check_skip(skip, type(self).__name__)

    @property
    def length(self) -> int:
        """The number of batches in the wrapped sampler (Determined stores this attribute)."""
        return len(self)

    def __len__(self) -> int:
        return length_of(self.batch_sampler, type(self).__name__)

    def __iter__(self) -> Iterator[List[int]]:
        return drop_first(self.batch_sampler, self.skip)


class ReproducibleShuffleSampler(torch.utils.data.Sampler[int]):
    """Shuffles another sampler's indices, each pass in a new order fixed by ``seed``.

    One ``numpy.random.RandomState(seed)`` is created with the sampler and drawn from at every
    pass, so pass ``k`` of two samplers built with the same seed is in the same order, and
    successive passes differ. Each ``iter()`` call is a pass: it reads the whole wrapped sampler
    and shuffles it right away.

    Shuffle before skipping and before repeating: a skip applied first would change what gets
    shuffled, and a repeat applied first would never end.

    Args:
        sampler: The finite index sampler to shuffle.
        seed: Seed of the random state, ``0 <= seed < 2**32``.

    Example:
        >>> first = ReproducibleShuffleSampler(range(6), seed=1)
        >>> again = ReproducibleShuffleSampler(range(6), seed=1)
        >>> list(first) == list(again), sorted(first)
        (True, [0, 1, 2, 3, 4, 5])
    """

    def __init__(self, sampler: Iterable[int], seed: int) -> None:
        self._sampler = sampler
        self._rng = np.random.RandomState(seed)

    def __iter__(self) -> Iterator[int]:
        return iter(shuffled(list(self._sampler), self._rng))

    def __len__(self) -> int:
        return length_of(self._sampler, type(self).__name__)


class ReproducibleShuffleBatchSampler(torch.utils.data.BatchSampler):
    """Shuffles another batch sampler's batches, each pass in a new order fixed by ``seed``.

    Works as :class:`ReproducibleShuffleSampler`, on whole batches: the contents of each batch stay
    as the wrapped sampler made them. Shuffling indices before batching (a
    :class:`ReproducibleShuffleSampler` inside a ``BatchSampler``) mixes better, because batches
    then hold different records every epoch; prefer it where you can.

    Determined's class derives from ``Sampler`` only; this one derives from ``BatchSampler`` (a
    ``Sampler`` too), since it yields batches.

    Args:
        batch_sampler: The finite batch sampler to shuffle.
        seed: Seed of the random state, ``0 <= seed < 2**32``.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> batches = BatchSampler(SequentialSampler(range(6)), batch_size=2, drop_last=False)
        >>> sorted(ReproducibleShuffleBatchSampler(batches, seed=3))
        [[0, 1], [2, 3], [4, 5]]
    """

    def __init__(self, batch_sampler: Iterable[List[int]], seed: int) -> None:
        self._batch_sampler = batch_sampler
        self._rng = np.random.RandomState(seed)

    def __iter__(self) -> Iterator[List[int]]:
        return iter(shuffled(list(self._batch_sampler), self._rng))

    def __len__(self) -> int:
        return length_of(self._batch_sampler, type(self).__name__)
