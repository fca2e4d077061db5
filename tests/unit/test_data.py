"""The training order machinery: resume mid-pass, sharding, and the loader's argument checks."""

import itertools
from typing import Any, List

import pytest
import torch
from torch.utils import data

from det_lightning import pytorch
from det_lightning.pytorch._data import ResumableBatchSampler, data_length, to_device


def shuffled_batches(n: int = 23, batch_size: int = 4) -> data.BatchSampler:
    return data.BatchSampler(data.RandomSampler(range(n)), batch_size, drop_last=False)


def take(sampler: ResumableBatchSampler, count: int) -> List[List[int]]:
    return list(itertools.islice(iter(sampler), count))


@pytest.mark.parametrize("offset", [1, 3, 5, 6, 7, 13, 20])
def test_resume_at_any_offset_continues_with_the_straight_runs_batches(offset: int) -> None:
    torch.manual_seed(0)
    straight = ResumableBatchSampler(shuffled_batches())
    batches = take(straight, 30)
    # A checkpoint at `offset` keeps the states of passes still needed; the global generator is
    # then anywhere (a restored run sets it from the checkpoint; here we scramble it).
    states = straight.state(offset)
    torch.manual_seed(0)
    take(ResumableBatchSampler(shuffled_batches()), offset)  # re-live the draws up to offset
    rng = torch.get_rng_state()
    resumed = ResumableBatchSampler(shuffled_batches(), start_batch=offset, pass_states=states)
    torch.set_rng_state(rng)
    assert take(resumed, 30 - offset) == batches[offset:]


def test_passes_are_reshuffled_and_cover_the_data() -> None:
    torch.manual_seed(1)
    stream = take(ResumableBatchSampler(shuffled_batches(n=12, batch_size=4)), 9)
    first, second = stream[:3], stream[3:6]
    assert sorted(sum(first, [])) == list(range(12)) == sorted(sum(second, []))
    assert first != second


def test_matches_torch_randomsampler_draw_for_draw() -> None:
    """Our per-pass draw is exactly torch's RandomSampler's, so a plain torch loop and ours see
    the same order and leave the global generator in the same state."""
    torch.manual_seed(7)
    expected = [list(b) for _ in range(3) for b in shuffled_batches()]
    after_torch = torch.rand(1)
    torch.manual_seed(7)
    ours = take(ResumableBatchSampler(shuffled_batches()), len(expected))
    assert ours == expected
    assert torch.equal(torch.rand(1), after_torch)


@pytest.mark.parametrize("replicas", [2, 3])
def test_ranks_get_disjoint_shards_covering_the_data(replicas: int) -> None:
    per_rank = []
    for rank in range(replicas):
        sampler = ResumableBatchSampler(shuffled_batches(n=24), replicas, rank, base_seed=42)
        per_rank.append(take(sampler, len(sampler)))
    flat = [i for rank_batches in per_rank for batch in rank_batches for i in batch]
    assert sorted(flat) == list(range(24))  # one pass: every record exactly once


def test_ranks_agree_on_every_pass_with_a_base_seed() -> None:
    """With several processes each pass's shuffle comes from the shared base seed, not from
    each process's generator (which Determined uses, giving overlapping shards)."""
    streams = []
    for rank in range(2):
        torch.manual_seed(100 + rank)  # different per-process generators
        streams.append(take(ResumableBatchSampler(shuffled_batches(n=16), 2, rank, base_seed=5), 8))
    for pass_idx in range(4):
        first = (
            streams[0][pass_idx * 2 : pass_idx * 2 + 2]
            + streams[1][pass_idx * 2 : pass_idx * 2 + 2]
        )
        assert sorted(i for b in first for i in b) == list(range(16))


def test_loader_argument_errors_name_the_fix() -> None:
    dataset = data.TensorDataset(torch.arange(10.0))
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        pytorch.DataLoader(dataset, sampler=data.SequentialSampler(dataset), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        pytorch.DataLoader(dataset, batch_size=4, batch_sampler=shuffled_batches(10))
    with pytest.raises(ValueError, match="IterableDatasets are not supported"):
        pytorch.DataLoader(_Stream())
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        pytorch.DataLoader(dataset, persistent_workers=True)


def test_empty_training_data_is_refused() -> None:
    with pytest.raises(ValueError, match="yields no batches"):
        ResumableBatchSampler(data.BatchSampler(range(3), 4, drop_last=True))


class _Stream(data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(3))


def test_data_length_and_to_device_handle_nested_batches() -> None:
    import numpy as np

    batch = {
        "x": np.zeros((5, 2), dtype=np.float32),
        "meta": [torch.ones(5), ("a", torch.zeros(5))],
    }
    moved = to_device(batch, torch.device("cpu"))
    assert isinstance(moved["x"], torch.Tensor) and moved["x"].shape == (5, 2)
    assert isinstance(moved["meta"][1], tuple) and moved["meta"][1][0] == "a"
    assert data_length(batch) == 5
    assert data_length([torch.ones(3, 1)]) == 3
    with pytest.raises(ValueError, match="get_batch_length"):
        data_length({})
    with pytest.raises(TypeError, match="get_batch_length"):
        data_length(object())  # type: ignore[arg-type]
