"""``StopAgreement`` in one process: when it agrees, what it proposes, and its fixed mode.

The collective runs on a one-member gloo group standing in for the world (a MAX all-reduce over
one rank returns this rank's values), so the bookkeeping around it is exercised without
spawning processes; ``tests/distributed/test_stop_agreement.py`` runs the real two-rank case."""

import dataclasses
import gc
import weakref
from typing import Iterator

import pytest
import torch.distributed as dist

from det_lightning.adapters import preemption
from det_lightning.adapters.preemption import FIRST_AGREEMENT, STOP_AGREEMENT_ENV, StopAgreement
from det_lightning.pytorch._boundaries import Boundary


@dataclasses.dataclass
class Ranks:
    size: int = 2


@pytest.fixture
def world() -> Iterator[None]:
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_one_process_agrees_after_every_batch_without_a_collective() -> None:
    stops = StopAgreement(Ranks(size=1), lambda local: local, environ={})
    assert all(stops.due(b, frozenset()) for b in range(1, 5))
    assert stops.agree(1, False) is False and stops.agree(2, True) is True
    assert stops.after_batch(3, frozenset(), True) is True
    assert stops.after_batch(4, frozenset(), False) is False
    assert stops.agreements == 0  # no collective ran (none is initialized here)


def test_a_wish_to_stop_waits_for_the_next_agreement(world: None) -> None:
    stops = StopAgreement(Ranks(), lambda local: local, environ={STOP_AGREEMENT_ENV: "4"})
    answers = [stops.after_batch(b, frozenset(), local=b >= 2) for b in range(1, 6)]
    assert answers == [False, False, False, True, False]  # asked at batch 2, agreed at 4
    assert stops.agreements == 1


def test_a_fixed_interval_agrees_every_n_batches_and_at_boundaries(world: None) -> None:
    stops = StopAgreement(Ranks(), lambda local: local, environ={STOP_AGREEMENT_ENV: "4"})
    agreed = []
    for b in range(1, 13):
        reached = {Boundary.VALIDATE} if b == 6 else set()
        if stops.due(b, reached):
            agreed.append(b)
            assert stops.agree(b, local=False) is False
    assert agreed == [4, 6, 10]  # the interval restarts from the boundary's agreement
    assert stops.agreements == 3


def test_the_interval_adapts_to_the_measured_times(
    world: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batch 16 after 16 ms, its agreement 1 ms; batch 32 after 16 ms more.
    clock = iter([0.0, 0.016, 0.017, 0.033, 0.034])
    monkeypatch.setattr(preemption.time, "perf_counter", lambda: next(clock))
    stops = StopAgreement(Ranks(), lambda local: local, environ={})
    assert not stops.due(FIRST_AGREEMENT - 1, frozenset())
    assert stops.due(FIRST_AGREEMENT, frozenset())
    assert stops.agree(FIRST_AGREEMENT, local=False) is False
    # No agreement had been timed yet: the first interval again.
    assert stops.next_at == 2 * FIRST_AGREEMENT
    assert stops.agree(2 * FIRST_AGREEMENT, local=True) is True
    # 1 ms batches, 1 ms agreements: agreeing every 500 batches costs 0.2% of the time.
    assert stops.next_at == 2 * FIRST_AGREEMENT + 500


def test_a_bad_fixed_interval_names_the_fix() -> None:
    with pytest.raises(ValueError, match="whole number of batches >= 1"):
        StopAgreement(Ranks(), lambda local: local, environ={STOP_AGREEMENT_ENV: "0"})


def test_the_agreement_keeps_no_process_group_alive_after_destroy_process_group() -> None:
    """A group object kept past ``destroy_process_group()`` (the agreement lives in the trainer's
    reference cycles) would run gloo's threads into the interpreter's teardown, which can abort
    a finished process; on gloo the agreement uses the default group without holding it."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    stops = StopAgreement(Ranks(), lambda local: local, environ={})
    assert stops.agree(FIRST_AGREEMENT, local=True) is True
    world = weakref.ref(dist.group.WORLD)
    dist.destroy_process_group()
    gc.disable()  # only references, not a collection, may end it
    try:
        assert world() is None
    finally:
        gc.enable()
    stops.close()


def test_a_side_group_of_its_own_is_destroyed_by_close(
    world: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training on another backend (NCCL), the agreement makes a gloo group of its own; fit()
    ends by closing it."""
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    made = []
    new_group = dist.new_group
    monkeypatch.setattr(dist, "new_group", lambda **kw: made.append(new_group(**kw)) or made[-1])
    stops = StopAgreement(Ranks(), lambda local: local, environ={})
    assert stops.agree(FIRST_AGREEMENT, local=False) is False
    assert stops.agree(2 * FIRST_AGREEMENT, local=True) is True
    assert len(made) == 1  # once, at the first agreement
    side = weakref.ref(made.pop())
    stops.close()
    assert side() is None
    assert stops.agree(3 * FIRST_AGREEMENT, local=False) is False  # a later fit() makes another
    stops.close()
