"""Metrics combined across ranks, in one process: each rank a thread over the fake
``torch.distributed`` of ``tests/unit/test_distributed_context.py``, the numbers compared with
the real Determined 0.38.1's own functions given the same per-rank values (issue 34, item 2:
collective semantics without processes). ``tests/distributed`` keeps the two-process runs,
which show what only processes can (the launch, gloo, the timing of the agreement)."""

from typing import Any, Callable, Dict, List

import numpy as np
import pytest
from determined import pytorch as det_pytorch
from determined.pytorch import _metric_utils as det_metrics

from det_lightning.adapters import metrics as ours
from det_lightning.pytorch import Reducer
from tests.unit.test_distributed_context import FakeWorld, ctx, world  # noqa: F401 (a fixture)


def _batches(rank: int, count: int) -> List[Dict[str, Any]]:
    """``count`` batches of metrics as ``evaluate_batch``/``train_batch`` give them, as numpy
    (what reaches the reduction), different on every rank."""
    generator = np.random.default_rng(100 + rank)
    return [
        {
            "loss": np.asarray(generator.random(), dtype=np.float32),
            "accuracy": np.asarray(generator.integers(0, 8) / 8, dtype=np.float64),
        }
        for _ in range(count)
    ]


@pytest.mark.parametrize("counts", [[3, 2, 1], [2, 1, 0], [4, 4]], ids=["3-2-1", "2-1-0", "4-4"])
@pytest.mark.parametrize("reducer", ["AVG", "SUM", "MAX", "MIN"])
def test_validation_metrics_reduce_across_ranks_as_determineds(
    world: Callable[[int], FakeWorld],  # noqa: F811 (the fixture)
    counts: List[int],
    reducer: str,
) -> None:
    size = len(counts)
    fake = world(size)

    def body(rank: int) -> Any:
        dist = ctx(rank=rank, size=size, local_size=size)
        batches = _batches(rank, counts[rank])
        keys = batches[0].keys() if batches else None
        mine = ours.reduce_validation_metrics(batches, keys, Reducer[reducer], dist)
        theirs = det_metrics._reduce_metrics(
            dist,
            batch_metrics=batches,
            keys=keys,
            metrics_reducers={k: det_pytorch.Reducer[reducer] for k in (keys or [])},
        )
        return mine, theirs

    results = fake.run(body)
    chief_ours, chief_theirs = results[0]
    assert set(chief_ours) == set(chief_theirs) == {"loss", "accuracy"}
    for name in chief_theirs:
        assert chief_ours[name] == chief_theirs[name], (name, chief_ours, chief_theirs)
    # Determined gives the numbers to the chief only; every rank has them here.
    assert all(r[0] == chief_ours for r in results)
    assert all(r[1] == {} for r in results[1:])


def test_training_metrics_average_over_ranks_batch_by_batch_as_determineds(
    world: Callable[[int], FakeWorld],  # noqa: F811 (the fixture)
) -> None:
    size, count = 3, 4
    fake = world(size)

    def body(rank: int) -> Any:
        dist = ctx(rank=rank, size=size, local_size=size)
        batches = _batches(rank, count)
        averages, per_batch = ours.average_training_metrics(list(batches), dist)
        theirs = det_metrics._combine_and_average_training_metrics(dist, list(batches))
        return averages, per_batch, theirs

    results = fake.run(body)
    averages, per_batch, theirs = results[0]
    assert len(per_batch) == len(theirs) == count
    for mine, det in zip(per_batch, theirs):
        assert {k: float(v) for k, v in mine.items()} == {k: float(v) for k, v in det.items()}
    for name in ("loss", "accuracy"):
        assert averages[name] == np.mean(np.array([b[name] for b in theirs])).item()
    assert all(r[0] == averages for r in results)  # every rank has the chief's averages
