"""``core.DistributedContext``: rank bookkeeping, constructors, and collectives.

Collectives across ranks run thread-per-rank over a fake ``torch.distributed`` (Determined's
``test_reducer.py`` does the same); real processes are in ``tests/distributed``.
"""

import threading
from typing import Any, Callable, Dict, Iterator, List

import pytest
import torch.distributed as dist

from det_lightning import core
from det_lightning.core import DistributedContext, DummyDistributedContext
from det_lightning.core._distributed import init_local_groups


def ctx(rank: int, size: int, local_size: int, **kw: Any) -> DistributedContext:
    return DistributedContext(
        rank=rank,
        size=size,
        local_rank=rank % local_size,
        local_size=local_size,
        cross_rank=rank // local_size,
        cross_size=size // local_size,
        **kw,
    )


class FakeGroup(list):
    """A process group: its ranks. Like torch's groups, weakly referenceable."""


class FakeWorld:
    """``torch.distributed``'s object collectives for ranks that are threads of one process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.groups: List[FakeGroup] = []  # as torch's registry, the owner of every group
        self.local = threading.local()
        self.slots: Dict[Any, Dict[int, Any]] = {}
        self.lock = threading.Lock()
        self.calls: List[str] = []

    def _exchange(self, key: Any, ranks: List[int], obj: Any) -> Dict[int, Any]:
        # Ranks outside `ranks` never call; pair the members with a per-group barrier.
        with self.lock:
            barriers = self.slots.setdefault(("barrier", key), {})
            barrier = barriers.setdefault(0, threading.Barrier(len(ranks), timeout=10))
            self.slots.setdefault(key, {})[self.local.rank] = obj
        barrier.wait()
        table = dict(self.slots[key])
        barrier.wait()  # everyone has read before anyone writes the next round
        return table

    def all_gather_object(self, out: List[Any], obj: Any, group: Any = None) -> None:
        ranks = group if group is not None else list(range(self.size))
        self.calls.append("world" if group is None else f"group{ranks}")
        table = self._exchange(("gather", tuple(ranks)), ranks, obj)
        out[:] = [table[r] for r in ranks]

    def broadcast_object_list(self, box: List[Any], src: int = 0, group: Any = None) -> None:
        table = self._exchange(("bcast", None), list(range(self.size)), box[0])
        box[0] = table[src]

    def new_subgroups_by_enumeration(self, ranks_per_subgroup: List[List[int]]) -> Any:
        groups = [FakeGroup(ranks) for ranks in ranks_per_subgroup]
        with self.lock:
            self.groups.extend(groups)
        mine = next(group for group in groups if self.local.rank in group)
        return mine, groups

    def destroy_process_group(self) -> None:
        self.groups.clear()

    def run(self, fn: Callable[[int], Any]) -> List[Any]:
        results: List[Any] = [None] * self.size
        errors: List[BaseException] = []

        def body(rank: int) -> None:
            self.local.rank = rank
            try:
                results[rank] = fn(rank)
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        if errors:
            raise errors[0]
        return results


@pytest.fixture
def world() -> Iterator[Callable[[int], FakeWorld]]:
    # Undone before the autouse teardown, which asks torch.distributed whether to clean up.
    with pytest.MonkeyPatch.context() as patch:

        def make(size: int) -> FakeWorld:
            fake = FakeWorld(size)
            patch.setattr(dist, "is_initialized", lambda: True)
            for name in (
                "all_gather_object",
                "broadcast_object_list",
                "new_subgroups_by_enumeration",
            ):
                patch.setattr(dist, name, getattr(fake, name))
            return fake

        yield make


# ----- bookkeeping ----------------------------------------------------------------------------
def test_accessors_use_determined_names() -> None:
    d = ctx(rank=3, size=4, local_size=2)
    assert (d.get_rank(), d.get_size(), d.get_local_rank(), d.get_local_size()) == (3, 4, 1, 2)
    assert (d.get_cross_rank(), d.get_cross_size(), d.get_num_agents()) == (1, 2, 2)
    assert "rank=3, size=4" in repr(d)
    d.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rank=2, size=2, local_rank=0, local_size=1, cross_rank=0, cross_size=2),
        dict(rank=0, size=2, local_rank=2, local_size=2, cross_rank=0, cross_size=1),
    ],
)
def test_impossible_ranks_are_rejected(kwargs: Dict[str, int]) -> None:
    with pytest.raises(ValueError, match="need 0 <="):
        DistributedContext(**kwargs)


def test_from_torch_distributed_reads_torchruns_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    d = core.DistributedContext.from_torch_distributed()
    assert (d.rank, d.size, d.local_rank, d.local_size, d.cross_rank, d.cross_size) == (
        3,
        4,
        1,
        2,
        1,
        2,
    )


def test_from_torch_distributed_names_the_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(KeyError, match="WORLD_SIZE.*torchrun"):
        DistributedContext.from_torch_distributed()


def test_horovod_points_to_lightning() -> None:
    with pytest.raises(NotImplementedError, match="--devices N"):
        DistributedContext.from_horovod(object())


# ----- collectives without communication ------------------------------------------------------
def test_a_single_process_needs_no_process_group() -> None:
    d = DummyDistributedContext()
    assert d.allgather(1) == [1] and d.gather(1) == [1] and d.broadcast(1) == 1
    assert d.allgather_local(1) == [1] and d.gather_local(1) == [1] and d.broadcast_local(1) == 1


def test_node_local_collectives_of_a_lone_process_on_its_node_do_not_communicate() -> None:
    """Determined returns at once when local_size < 2; a global exchange would hang here,
    since the other node's rank never calls."""
    d = ctx(rank=1, size=2, local_size=1)
    assert d.allgather_local("x") == ["x"]
    assert d.gather_local("x") == ["x"]
    assert d.broadcast_local("x") == "x"


def test_collectives_without_a_process_group_say_how_to_get_one() -> None:
    with pytest.raises(RuntimeError, match="init_process_group"):
        ctx(rank=0, size=2, local_size=2).allgather(1)


# ----- collectives across ranks ---------------------------------------------------------------
def test_world_collectives_in_rank_order(world: Callable[[int], FakeWorld]) -> None:
    fake = world(3)

    def body(rank: int) -> Any:
        d = ctx(rank=rank, size=3, local_size=3)
        return d.allgather(rank * 10), d.gather(rank), d.broadcast(f"from {rank}")

    results = fake.run(body)
    assert [r[0] for r in results] == [[0, 10, 20]] * 3
    assert [r[1] for r in results] == [[0, 1, 2], None, None]
    assert [r[2] for r in results] == ["from 0"] * 3


def test_node_collectives_stay_within_the_node(world: Callable[[int], FakeWorld]) -> None:
    """Two nodes of two ranks; only node 1 calls allgather_local the second time."""
    fake = world(4)

    def body(rank: int) -> Any:
        d = ctx(rank=rank, size=4, local_size=2)
        init_local_groups(d)
        out = [d.allgather_local(rank), d.gather_local(rank), d.broadcast_local(f"chief {rank}")]
        if d.cross_rank == 1:
            out.append(d.allgather_local("node 1 only"))
        return out

    results = fake.run(body)
    assert [r[0] for r in results] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r[1] for r in results] == [[0, 1], None, [2, 3], None]
    assert [r[2] for r in results] == ["chief 0", "chief 0", "chief 2", "chief 2"]
    assert [r[3:] for r in results] == [[], [], [["node 1 only"] * 2], [["node 1 only"] * 2]]
    assert {c for c in fake.calls if c != "world"} == {"group[0, 1]", "group[2, 3]"}


def test_node_groups_end_with_destroy_process_group(world: Callable[[int], FakeWorld]) -> None:
    """The context holds its node's group weakly: ``destroy_process_group()`` must end the group
    (a group kept alive runs gloo's threads into the interpreter's teardown, which can abort
    a process that finished its work)."""
    fake = world(4)
    contexts = [ctx(rank=rank, size=4, local_size=2) for rank in range(4)]
    fake.run(lambda rank: init_local_groups(contexts[rank]))
    fake.destroy_process_group()
    with pytest.raises(RuntimeError, match=r"destroy_process_group\(\) ends it"):
        contexts[0].allgather_local(0)


def test_node_collectives_without_node_groups_point_to_init(
    world: Callable[[int], FakeWorld],
) -> None:
    world(1)
    with pytest.raises(RuntimeError, match=r"init\(distributed=\.\.\.\)"):
        ctx(rank=0, size=4, local_size=2).allgather_local(0)
