"""Behaviour of det_lightning.pytorch.samplers, checked without the real Determined."""

import ast
import doctest
import itertools
import pathlib
import threading
from typing import Any, Iterator, List, Set

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler, TensorDataset

from det_lightning.pytorch import _streams, samplers

SIZES = [0, 1, 2, 5, 7, 10, 33]


def batches_of(size: int, batch_size: int, drop_last: bool) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(size)), batch_size, drop_last)


class CountingSampler(Sampler[int]):
    """Pass ``k`` yields ``100 * k .. 100 * k + size - 1``, so tests can tell passes apart."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.passes = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        start = self.passes * 100
        self.passes += 1
        return iter(range(start, start + self.size))


class Unsized:
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


# --- module hygiene -------------------------------------------------------------------------


def test_docstring_examples_run() -> None:
    result = doctest.testmod(samplers, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10
    assert result.failed == 0


def _imports(path: str) -> Set[str]:
    imported: Set[str] = set()
    for node in ast.parse(pathlib.Path(path).read_text()).body:
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.module is not None
            imported.add(node.module)
    return imported


def test_module_imports_only_torch_numpy_and_stdlib_typing() -> None:
    # The samplers' own stream functions are the one import from det_lightning.
    assert _imports(samplers.__file__) <= {
        "typing",
        "numpy",
        "torch",
        "det_lightning.pytorch._streams",
    }
    assert _imports(_streams.__file__) <= {"operator", "typing", "numpy"}


def test_public_names() -> None:
    assert set(samplers.__all__) == {
        "RepeatSampler",
        "RepeatBatchSampler",
        "DistributedSampler",
        "DistributedBatchSampler",
        "SkipSampler",
        "SkipBatchSampler",
        "ReproducibleShuffleSampler",
        "ReproducibleShuffleBatchSampler",
    }


@pytest.mark.parametrize(
    "sampler",
    [
        samplers.RepeatSampler(range(3)),
        samplers.DistributedSampler(range(3), 2, 0),
        samplers.ReproducibleShuffleSampler(range(3), 0),
        samplers.SkipSampler(range(3), 1),
    ],
    ids=type,
)
def test_index_samplers_are_torch_samplers(sampler: Sampler) -> None:
    assert isinstance(sampler, Sampler)


@pytest.mark.parametrize(
    "batch_sampler",
    [
        samplers.RepeatBatchSampler(batches_of(4, 2, False)),
        samplers.DistributedBatchSampler(batches_of(4, 2, False), 2, 0),
        samplers.SkipBatchSampler(batches_of(4, 2, False), 1),
        samplers.ReproducibleShuffleBatchSampler(batches_of(4, 2, False), 0),
    ],
    ids=type,
)
def test_batch_samplers_are_torch_batch_samplers(batch_sampler: Sampler) -> None:
    assert isinstance(batch_sampler, BatchSampler)
    assert isinstance(batch_sampler, Sampler)


# --- RepeatSampler / RepeatBatchSampler -----------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 7])
def test_repeat_sampler_cycles_and_reports_one_pass(size: int) -> None:
    repeat = samplers.RepeatSampler(SequentialSampler(range(size)))
    assert len(repeat) == size
    assert list(itertools.islice(repeat, 3 * size + 1)) == list(range(size)) * 3 + [0]


def test_repeat_starts_a_new_pass_of_the_wrapped_sampler_each_time() -> None:
    counting = CountingSampler(2)
    out = list(itertools.islice(samplers.RepeatSampler(counting), 6))
    assert out == [0, 1, 100, 101, 200, 201]


@pytest.mark.parametrize("size,batch_size,drop_last", [(5, 2, False), (5, 2, True), (6, 3, True)])
def test_repeat_batch_sampler_cycles(size: int, batch_size: int, drop_last: bool) -> None:
    one_pass = list(batches_of(size, batch_size, drop_last))
    repeat = samplers.RepeatBatchSampler(batches_of(size, batch_size, drop_last))
    assert len(repeat) == len(one_pass)
    assert list(itertools.islice(repeat, 3 * len(one_pass))) == one_pass * 3


def first_item_error(stream: Any) -> BaseException:
    """The exception ``next(iter(stream))`` raises, read in a thread so that a hang fails fast."""
    caught: List[BaseException] = []

    def read() -> None:
        try:
            next(iter(stream))
        except BaseException as error:  # noqa: BLE001 - handed to the test
            caught.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "repeating an empty pass hung instead of raising"
    assert caught, "repeating an empty pass yielded an item"
    return caught[0]


def test_repeat_of_an_empty_sampler_raises_instead_of_hanging() -> None:
    error = first_item_error(samplers.RepeatSampler(range(0)))
    assert isinstance(error, RuntimeError) and "yielded nothing" in str(error)


def test_repeat_of_a_batchless_batch_sampler_raises_instead_of_hanging() -> None:
    repeat = samplers.RepeatBatchSampler(batches_of(3, 4, drop_last=True))
    assert len(repeat) == 0
    error = first_item_error(repeat)
    assert isinstance(error, RuntimeError) and "drop_last=True" in str(error)


def test_repeat_keeps_the_batch_sampler_attribute() -> None:
    inner = batches_of(4, 2, False)
    assert samplers.RepeatBatchSampler(inner).batch_sampler is inner


# --- DistributedSampler / DistributedBatchSampler -------------------------------------------


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("num_workers", [2, 3])
def test_distributed_shards_are_disjoint_and_cover_the_data(size: int, num_workers: int) -> None:
    shards = [
        list(samplers.DistributedSampler(SequentialSampler(range(size)), num_workers, rank))
        for rank in range(num_workers)
    ]
    flat = [index for shard in shards for index in shard]
    assert sorted(flat) == list(range(size))
    assert len(set(flat)) == len(flat)
    for rank, shard in enumerate(shards):
        assert shard == list(range(rank, size, num_workers))
        shard_len = len(samplers.DistributedSampler(range(size), num_workers, rank))
        assert shard_len == len(shard)
    lengths = [len(shard) for shard in shards]
    assert max(lengths) - min(lengths) <= 1
    assert lengths == sorted(lengths, reverse=True)  # lower ranks get the leftovers


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("num_workers", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_batch_shards_are_disjoint_and_cover_the_batches(
    size: int, num_workers: int, drop_last: bool
) -> None:
    all_batches = list(batches_of(size, 3, drop_last))
    shards = [
        samplers.DistributedBatchSampler(batches_of(size, 3, drop_last), num_workers, rank)
        for rank in range(num_workers)
    ]
    dealt = [list(shard) for shard in shards]
    for rank, (shard, batches) in enumerate(zip(shards, dealt)):
        assert batches == all_batches[rank::num_workers]
        assert len(shard) == len(batches)
    indices = [i for batches in dealt for batch in batches for i in batch]
    assert sorted(indices) == sorted(i for batch in all_batches for i in batch)
    assert len(set(indices)) == len(indices)


def test_single_worker_distributed_is_the_identity() -> None:
    assert list(samplers.DistributedSampler(range(5), 1, 0)) == [0, 1, 2, 3, 4]
    batches = batches_of(5, 2, False)
    assert list(samplers.DistributedBatchSampler(batches, 1, 0)) == list(batches)
    assert len(samplers.DistributedBatchSampler(batches, 1, 0)) == 3


def test_distributed_over_a_repeat_deals_round_robin_across_epochs() -> None:
    # 5 batches per epoch, 2 ranks: epoch boundaries do not realign the deal.
    streams = [
        samplers.DistributedBatchSampler(
            samplers.RepeatBatchSampler(batches_of(10, 2, False)), 2, rank
        )
        for rank in range(2)
    ]
    rank0, rank1 = (list(itertools.islice(stream, 5)) for stream in streams)
    assert rank0 == [[0, 1], [4, 5], [8, 9], [2, 3], [6, 7]]
    assert rank1 == [[2, 3], [6, 7], [0, 1], [4, 5], [8, 9]]
    assert [len(stream) for stream in streams] == [3, 2]


def test_distributed_batch_sampler_attributes() -> None:
    inner = batches_of(4, 2, False)
    shard = samplers.DistributedBatchSampler(inner, 3, 2)
    assert (shard.batch_sampler, shard.num_workers, shard.rank) == (inner, 3, 2)


@pytest.mark.parametrize("cls", [samplers.DistributedSampler, samplers.DistributedBatchSampler])
@pytest.mark.parametrize(
    "num_workers,rank,pattern",
    [
        (2, 2, r"rank=2 with num_workers=2; expected 0 <= rank < 2"),
        (3, 7, r"rank=7 with num_workers=3"),
        (2, -1, r"non-negative, got rank=-1"),
        (0, 0, r"at least 1, got num_workers=0"),
        (-2, 0, r"at least 1, got num_workers=-2"),
    ],
)
def test_distributed_rejects_bad_shards(
    cls: Any, num_workers: int, rank: int, pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        cls(range(4), num_workers, rank)


@pytest.mark.parametrize("cls", [samplers.DistributedSampler, samplers.DistributedBatchSampler])
@pytest.mark.parametrize("num_workers,rank", [(2.0, 0), (2, "1"), (True, 0), (2, None)])
def test_distributed_rejects_non_integers(cls: Any, num_workers: Any, rank: Any) -> None:
    with pytest.raises(TypeError, match="must be an integer"):
        cls(range(4), num_workers, rank)


def test_distributed_accepts_numpy_and_torch_integers() -> None:
    import numpy as np

    num_workers: Any = np.int64(2)
    rank: Any = torch.tensor(1)
    shard = samplers.DistributedSampler(range(5), num_workers, rank)
    assert list(shard) == [1, 3]
    assert len(shard) == 2


# --- SkipSampler / SkipBatchSampler ---------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 5])
@pytest.mark.parametrize("skip", [0, 1, 3, 5, 6, 100])
def test_skip_sampler_drops_a_prefix_and_reports_the_full_length(size: int, skip: int) -> None:
    skipped = samplers.SkipSampler(SequentialSampler(range(size)), skip)
    assert list(skipped) == list(range(size))[skip:]
    assert len(skipped) == size  # the skip never changes the length, as in Determined


@pytest.mark.parametrize("skip", [0, 1, 2, 3, 4, 10])
def test_skip_batch_sampler_drops_whole_batches(skip: int) -> None:
    batches = batches_of(7, 2, False)  # [0,1] [2,3] [4,5] [6]
    skipped = samplers.SkipBatchSampler(batches, skip)
    assert list(skipped) == list(batches)[skip:]
    assert len(skipped) == skipped.length == 4
    assert skipped.skip == skip and skipped.batch_sampler is batches


def test_skip_over_a_repeat_applies_once() -> None:
    stream = samplers.SkipSampler(samplers.RepeatSampler(range(3)), 2)
    assert list(itertools.islice(stream, 5)) == [2, 0, 1, 2, 0]


@pytest.mark.parametrize("cls", [samplers.SkipSampler, samplers.SkipBatchSampler])
def test_skip_rejects_negative_and_non_integer_skips(cls: Any) -> None:
    with pytest.raises(ValueError, match="got skip=-1"):
        cls(range(3), -1)
    with pytest.raises(TypeError, match="skip must be an integer"):
        cls(range(3), 1.5)


# --- ReproducibleShuffleSampler / ReproducibleShuffleBatchSampler ---------------------------


def passes(sampler: Any, count: int) -> List[List[Any]]:
    return [list(sampler) for _ in range(count)]


@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_shuffle_is_deterministic_per_seed_and_a_permutation(seed: int) -> None:
    first = passes(samplers.ReproducibleShuffleSampler(SequentialSampler(range(50)), seed), 3)
    again = passes(samplers.ReproducibleShuffleSampler(SequentialSampler(range(50)), seed), 3)
    assert first == again
    for order in first:
        assert sorted(order) == list(range(50))
        assert all(type(index) is int for index in order)
    assert len(samplers.ReproducibleShuffleSampler(range(50), seed)) == 50


def test_shuffle_differs_across_seeds_and_passes() -> None:
    by_seed = [passes(samplers.ReproducibleShuffleSampler(range(50), seed), 3) for seed in range(4)]
    first_passes = [tuple(p[0]) for p in by_seed]
    assert len(set(first_passes)) == 4
    for seed_passes in by_seed:
        assert len({tuple(p) for p in seed_passes}) == 3
        assert seed_passes[0] != list(range(50))


def test_shuffle_draws_its_order_when_iter_is_called() -> None:
    reference = passes(samplers.ReproducibleShuffleSampler(range(20), 5), 2)
    sampler = samplers.ReproducibleShuffleSampler(range(20), 5)
    first, second = iter(sampler), iter(sampler)  # two passes started before either is read
    assert [list(second), list(first)] == [reference[1], reference[0]]


def test_shuffle_batch_sampler_reorders_whole_batches() -> None:
    batches = list(batches_of(20, 3, False))
    shuffle = samplers.ReproducibleShuffleBatchSampler(batches_of(20, 3, False), 11)
    orders = passes(shuffle, 3)
    for order in orders:
        assert sorted(order) == sorted(batches)  # same batches, contents untouched
    assert len({tuple(map(tuple, order)) for order in orders}) == 3
    again = samplers.ReproducibleShuffleBatchSampler(batches_of(20, 3, False), 11)
    assert passes(again, 3) == orders
    other = samplers.ReproducibleShuffleBatchSampler(batches_of(20, 3, False), 12)
    assert passes(other, 1)[0] != orders[0]
    assert len(shuffle) == len(batches)


def test_shuffle_of_empty_and_single_item_samplers() -> None:
    assert passes(samplers.ReproducibleShuffleSampler(range(0), 1), 2) == [[], []]
    assert passes(samplers.ReproducibleShuffleSampler(range(1), 1), 2) == [[0], [0]]


# --- composition and torch integration ------------------------------------------------------


def training_stream(size: int, seed: int, num_workers: int, rank: int, skip: int) -> Any:
    """The chain Determined builds for a training loader, shuffle first."""
    stream: Any = batches_of(size, 4, False)
    stream = samplers.ReproducibleShuffleBatchSampler(stream, seed)
    stream = samplers.RepeatBatchSampler(stream)
    stream = samplers.DistributedBatchSampler(stream, num_workers, rank)
    return samplers.SkipBatchSampler(stream, skip)


@pytest.mark.parametrize("rank", [0, 1, 2])
@pytest.mark.parametrize("skip", [0, 1, 4, 9])
def test_resuming_with_a_skip_continues_the_same_stream(rank: int, skip: int) -> None:
    fresh = list(itertools.islice(training_stream(30, 3, 3, rank, 0), skip + 10))
    resumed = list(itertools.islice(training_stream(30, 3, 3, rank, skip), 10))
    assert resumed == fresh[skip:]


def test_every_rank_sees_each_epoch_once_per_global_epoch() -> None:
    # 8 batches per epoch dealt to 2 ranks: 4 steps of both ranks together are exactly one epoch.
    streams = [training_stream(32, 0, 2, rank, 0) for rank in range(2)]
    steps = [list(itertools.islice(stream, 8)) for stream in streams]
    for epoch in range(2):
        seen = [i for rank in range(2) for b in steps[rank][4 * epoch : 4 * epoch + 4] for i in b]
        assert sorted(seen) == list(range(32))


def test_data_loader_accepts_the_batch_samplers() -> None:
    dataset = TensorDataset(torch.arange(10))

    def make() -> samplers.SkipBatchSampler:
        shuffled = samplers.ReproducibleShuffleBatchSampler(batches_of(10, 2, False), 0)
        return samplers.SkipBatchSampler(samplers.DistributedBatchSampler(shuffled, 2, 1), 1)

    loader = DataLoader(dataset, batch_sampler=make())
    assert len(loader) == 2  # the skip is not subtracted, as in Determined
    got = [batch[0].tolist() for batch in loader]
    assert got == list(make()) and len(got) == 1


def test_data_loader_accepts_the_index_samplers() -> None:
    dataset = TensorDataset(torch.arange(10))

    def make() -> samplers.DistributedSampler:
        return samplers.DistributedSampler(samplers.ReproducibleShuffleSampler(range(10), 4), 3, 0)

    loader = DataLoader(dataset, sampler=make(), batch_size=2)
    got = [i for (batch,) in loader for i in batch.tolist()]
    assert got == list(make())
    assert len(loader) == 2


@pytest.mark.parametrize(
    "make",
    [
        samplers.RepeatSampler,
        samplers.RepeatBatchSampler,
        lambda s: samplers.ReproducibleShuffleSampler(s, 0),
        lambda s: samplers.ReproducibleShuffleBatchSampler(s, 0),
        lambda s: samplers.DistributedSampler(s, 2, 0),
        lambda s: samplers.DistributedBatchSampler(s, 2, 0),
        lambda s: samplers.SkipSampler(s, 1),
        lambda s: samplers.SkipBatchSampler(s, 1),
    ],
)
def test_len_of_an_unsized_sampler_names_the_wrapper(make: Any) -> None:
    wrapper = make(Unsized())
    with pytest.raises(TypeError, match=f"{type(wrapper).__name__} needs the length.*Unsized"):
        len(wrapper)
