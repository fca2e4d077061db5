"""det_lightning.pytorch.samplers against determined.pytorch.samplers 0.38.1: same order, same len.

Every case builds the same chain twice, once from each module, over the same torch base sampler,
and compares the first items (a few passes' worth from the endless samplers) and ``len()``.
Endless streams over an empty pass are never read: Determined's loop forever there.
"""

import itertools
from types import ModuleType
from typing import Any, List

import determined.pytorch.samplers as det_samplers
import pytest
from torch.utils.data import BatchSampler, Sampler, SequentialSampler

from det_lightning.pytorch import samplers as our_samplers

pytestmark = pytest.mark.interop

SIZES = [1, 7, 10, 33]
BATCH_SIZES = [1, 3, 4, 8]
SEEDS = [0, 1, 42, 2**32 - 1]
SHARDS = [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)]


def skips_for(length: int) -> List[int]:
    """0, 1, 5, exactly the length, and past the end."""
    return sorted({0, 1, 5, length, length + 3})


def take(sampler: Any, count: int) -> List[Any]:
    return list(itertools.islice(iter(sampler), count))


def assert_same(ours: Any, theirs: Any, count: int) -> None:
    assert len(ours) == len(theirs)
    got, expected = take(ours, count), take(theirs, count)
    assert got == expected
    # Same element types too: indices stay python ints, batches stay lists.
    assert [type(item) for item in got] == [type(item) for item in expected]


def index_base(size: int) -> Sampler:
    return SequentialSampler(range(size))


def batch_base(size: int, batch_size: int, drop_last: bool) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(size)), batch_size, drop_last)


BATCH_CASES = [
    (size, batch_size, drop_last)
    for size in SIZES
    for batch_size in BATCH_SIZES
    for drop_last in (False, True)
]


def batch_case_id(case: Any) -> str:
    size, batch_size, drop_last = case
    return f"n{size}-b{batch_size}-{'drop' if drop_last else 'keep'}"


# --- index samplers -------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_repeat_sampler(size: int) -> None:
    ours = our_samplers.RepeatSampler(index_base(size))
    theirs = det_samplers.RepeatSampler(index_base(size))
    assert_same(ours, theirs, 3 * size)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("num_workers,rank", SHARDS)
def test_distributed_sampler(size: int, num_workers: int, rank: int) -> None:
    ours = our_samplers.DistributedSampler(index_base(size), num_workers, rank)
    theirs = det_samplers.DistributedSampler(index_base(size), num_workers, rank)
    assert_same(ours, theirs, size + 1)


@pytest.mark.parametrize("size", SIZES)
def test_skip_sampler(size: int) -> None:
    for skip in skips_for(size):
        ours = our_samplers.SkipSampler(index_base(size), skip)
        base: Any = index_base(size)  # Determined annotates this argument as a BatchSampler
        theirs = det_samplers.SkipSampler(base, skip)
        assert_same(ours, theirs, size + 1)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("seed", SEEDS)
def test_reproducible_shuffle_sampler_over_several_passes(size: int, seed: int) -> None:
    ours = our_samplers.ReproducibleShuffleSampler(index_base(size), seed)
    theirs = det_samplers.ReproducibleShuffleSampler(index_base(size), seed)
    for _ in range(4):  # each pass draws from the same random state
        assert_same(ours, theirs, size)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize("num_workers,rank", SHARDS)
def test_index_training_chain(size: int, seed: int, num_workers: int, rank: int) -> None:
    """shuffle -> repeat -> shard -> skip, over indices."""

    def chain(module: ModuleType, skip: int) -> Any:
        stream = module.ReproducibleShuffleSampler(index_base(size), seed)
        stream = module.RepeatSampler(stream)
        stream = module.DistributedSampler(stream, num_workers, rank)
        return module.SkipSampler(stream, skip)

    for skip in skips_for(size):
        assert_same(chain(our_samplers, skip), chain(det_samplers, skip), 3 * size)


# --- batch samplers -------------------------------------------------------------------------


@pytest.mark.parametrize("case", BATCH_CASES, ids=batch_case_id)
def test_repeat_batch_sampler(case: Any) -> None:
    ours = our_samplers.RepeatBatchSampler(batch_base(*case))
    theirs = det_samplers.RepeatBatchSampler(batch_base(*case))
    assert_same(ours, theirs, 3 * len(theirs))  # 0 when a pass has no batch


@pytest.mark.parametrize("case", BATCH_CASES, ids=batch_case_id)
@pytest.mark.parametrize("num_workers,rank", SHARDS)
def test_distributed_batch_sampler(case: Any, num_workers: int, rank: int) -> None:
    ours = our_samplers.DistributedBatchSampler(batch_base(*case), num_workers, rank)
    theirs = det_samplers.DistributedBatchSampler(batch_base(*case), num_workers, rank)
    assert_same(ours, theirs, case[0] + 1)


@pytest.mark.parametrize("case", BATCH_CASES, ids=batch_case_id)
def test_skip_batch_sampler(case: Any) -> None:
    for skip in skips_for(len(batch_base(*case))):
        ours = our_samplers.SkipBatchSampler(batch_base(*case), skip)
        theirs = det_samplers.SkipBatchSampler(batch_base(*case), skip)
        assert_same(ours, theirs, case[0] + 1)
        assert ours.length == theirs.length
        assert ours.skip == theirs.skip


@pytest.mark.parametrize("case", BATCH_CASES, ids=batch_case_id)
@pytest.mark.parametrize("seed", SEEDS)
def test_reproducible_shuffle_batch_sampler_over_several_passes(case: Any, seed: int) -> None:
    ours = our_samplers.ReproducibleShuffleBatchSampler(batch_base(*case), seed)
    theirs = det_samplers.ReproducibleShuffleBatchSampler(batch_base(*case), seed)
    for _ in range(4):
        assert_same(ours, theirs, case[0] + 1)


@pytest.mark.parametrize("case", BATCH_CASES, ids=batch_case_id)
@pytest.mark.parametrize("num_workers,rank", SHARDS)
def test_batch_training_chain(case: Any, num_workers: int, rank: int) -> None:
    """The order determined.pytorch.DataLoader uses: shuffle -> repeat -> shard -> skip."""
    one_pass = len(batch_base(*case))

    def chain(module: ModuleType, skip: int) -> Any:
        stream = module.ReproducibleShuffleBatchSampler(batch_base(*case), 7)
        stream = module.RepeatBatchSampler(stream)
        stream = module.DistributedBatchSampler(stream, num_workers, rank)
        return module.SkipBatchSampler(stream, skip)

    for skip in skips_for(one_pass):
        # Three passes' worth of batches; nothing at all when a pass is empty.
        assert_same(chain(our_samplers, skip), chain(det_samplers, skip), 3 * one_pass)


# --- validation and class shape -------------------------------------------------------------


@pytest.mark.parametrize("num_workers,rank", [(2, 2), (2, 5), (3, -1), (0, 0), (-1, 0)])
def test_distributed_batch_sampler_rejects_what_determined_rejects(
    num_workers: int, rank: int
) -> None:
    with pytest.raises(ValueError):
        det_samplers.DistributedBatchSampler(batch_base(4, 2, False), num_workers, rank)
    with pytest.raises(ValueError, match=f"rank={rank}|num_workers={num_workers}"):
        our_samplers.DistributedBatchSampler(batch_base(4, 2, False), num_workers, rank)


NAMES = [
    "RepeatSampler",
    "RepeatBatchSampler",
    "DistributedSampler",
    "DistributedBatchSampler",
    "SkipSampler",
    "SkipBatchSampler",
    "ReproducibleShuffleSampler",
    "ReproducibleShuffleBatchSampler",
]

EXTRA_ARGS = {
    "DistributedSampler": (2, 1),
    "DistributedBatchSampler": (2, 1),
    "SkipSampler": (1,),
    "SkipBatchSampler": (1,),
    "ReproducibleShuffleSampler": (3,),
    "ReproducibleShuffleBatchSampler": (3,),
}


@pytest.mark.parametrize("name", NAMES)
def test_isinstance_answers_at_least_what_determined_answers(name: str) -> None:
    """Any torch base class Determined's sampler passes an isinstance check for, ours passes too."""
    args = (batch_base(5, 2, False), *EXTRA_ARGS.get(name, ()))
    theirs = getattr(det_samplers, name)(*args)
    ours = getattr(our_samplers, name)(*args)
    for base in (Sampler, BatchSampler):
        if isinstance(theirs, base):
            assert isinstance(ours, base), (name, base)


def test_same_public_classes() -> None:
    theirs = {
        name
        for name, value in vars(det_samplers).items()
        if isinstance(value, type)
        and issubclass(value, Sampler)
        and value.__module__ == det_samplers.__name__
    }
    assert theirs == set(NAMES)
    assert set(our_samplers.__all__) == theirs
