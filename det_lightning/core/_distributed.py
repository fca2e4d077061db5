"""``DistributedContext``: who this process is, and object collectives over ``torch.distributed``.

Determined runs its own ZMQ sockets for these; we use the process group that Lightning's strategy
(or the user) already set up, so there is one communication layer. A context built with a
``chief_ip`` where no group exists (the workers of a launcher-style script) starts a gloo group
meeting at the chief.
"""

import os
import weakref
from typing import Any, List, Optional

from det_lightning._env import CHIEF_PORT_ENV


def _env_int(name: str, *fallbacks: str, default: Optional[int] = None) -> int:
    for key in (name, *fallbacks):
        if key in os.environ:
            return int(os.environ[key])
    if default is None:
        raise KeyError(
            f"Environment variable {name} is not set. DistributedContext.from_torch_distributed() "
            "reads the variables that torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...); launch "
            "with torchrun or pass the ranks to DistributedContext(...) directly."
        )
    return default


class DistributedContext:
    """Rank information and collectives for one process of a (possibly single-process) job.

    Args:
        rank: global rank of this process.
        size: number of processes.
        local_rank: rank among the processes of this node.
        local_size: processes on this node.
        cross_rank: index of this node.
        cross_size: number of nodes.
        chief_ip: the chief's address. Without a ``torch.distributed`` process group (a
            launcher-style script's workers), the first collective starts a gloo group that
            meets there, at port ``$DET_LIGHTNING_CHIEF_PORT`` (set in a trial) else
            ``pub_port + port_offset`` (Determined's ports); with a group, unused.
        pull_port, force_tcp: accepted for compatibility, unused.
    """

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        chief_ip: Optional[str] = None,
        pub_port: int = 12360,
        pull_port: int = 12365,
        port_offset: int = 0,
        force_tcp: bool = False,
    ) -> None:
        if not 0 <= rank < size:
            raise ValueError(
                f"DistributedContext(rank={rank}, size={size}): need 0 <= rank < size."
            )
        if not 0 <= local_rank < local_size:
            raise ValueError(
                f"DistributedContext(local_rank={local_rank}, local_size={local_size}): "
                "need 0 <= local_rank < local_size."
            )
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self._chief_ip = chief_ip
        self._chief_port = pub_port + port_offset
        self._owns_group = False
        # Weak: torch's registry owns the group, and destroy_process_group() must be able to end
        # it (a group kept alive past that runs gloo's threads into the interpreter's teardown).
        self._node_group: Optional["weakref.ref[Any]"] = None

    # ----- constructors -------------------------------------------------------------------
    @classmethod
    def from_torch_distributed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From the variables torchrun (or Lightning's launcher) sets: RANK, WORLD_SIZE, LOCAL_RANK,
        LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE. The first call in a multi-slot trial
        that runs once per node starts the processes first (``_relaunch``)."""
        if "RANK" not in os.environ:
            from det_lightning._relaunch import relaunch_if_first

            relaunch_if_first("DistributedContext.from_torch_distributed()")
        size = _env_int("WORLD_SIZE")
        local_size = _env_int("LOCAL_WORLD_SIZE", default=size)
        return cls(
            rank=_env_int("RANK"),
            size=size,
            local_rank=_env_int("LOCAL_RANK"),
            local_size=local_size,
            cross_rank=_env_int("GROUP_RANK", "NODE_RANK", default=0),
            cross_size=_env_int("GROUP_WORLD_SIZE", default=max(size // local_size, 1)),
            chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP"),
        )

    @classmethod
    def from_deepspeed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """DeepSpeed's launcher sets the torch variables too."""
        return cls.from_torch_distributed(chief_ip)

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: Optional[str] = None) -> "DistributedContext":
        raise NotImplementedError(
            "Horovod is not supported by det_lightning: Lightning's DDP strategy replaces it. "
            "Drop the Horovod launcher and run `python train.py --devices N` or torchrun."
        )

    # ----- accessors (Determined's names) -------------------------------------------------
    def get_rank(self) -> int:
        return self.rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_size(self) -> int:
        return self.size

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        return self.cross_size

    def close(self) -> None:
        """Ends the process group the collectives started (``chief_ip``); one that Lightning's
        strategy or the user started is theirs to end."""
        if self._owns_group:
            import torch.distributed as dist

            self._owns_group = False
            if dist.is_initialized():
                dist.destroy_process_group()

    # ----- collectives --------------------------------------------------------------------
    def _group_ready(self) -> bool:
        if self.size == 1:
            return False
        import torch.distributed as dist

        if dist.is_available() and not dist.is_initialized() and self._chief_ip:
            self._meet_at_chief()
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                f"DistributedContext(size={self.size}) needs an initialized torch.distributed "
                "process group for its collectives. det_lightning.pytorch.init() sets it up "
                "(launched with `python train.py --devices N` or torchrun); when you build the "
                "context yourself, call torch.distributed.init_process_group() first."
            )
        return True

    def _meet_at_chief(self) -> None:
        """A gloo group of ``size`` ranks meeting at ``chief_ip``, as Determined's contexts
        connect to the chief's sockets; collective, like their first message."""
        import datetime

        import torch.distributed as dist

        port = int(os.environ.get(CHIEF_PORT_ENV) or self._chief_port)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{self._chief_ip}:{port}",
            rank=self.rank,
            world_size=self.size,
            timeout=datetime.timedelta(minutes=30),
        )
        self._owns_group = True

    def allgather(self, stuff: Any) -> List:
        """Every rank gets the list of every rank's ``stuff``, in rank order."""
        if not self._group_ready():
            return [stuff]
        import torch.distributed as dist

        out: List[Any] = [None] * self.size
        dist.all_gather_object(out, stuff)
        return out

    def gather(self, stuff: Any) -> Optional[List]:
        """The chief gets every rank's ``stuff`` in rank order; other ranks get None."""
        everything = self.allgather(stuff)
        return everything if self.rank == 0 else None

    def broadcast(self, stuff: Any) -> Any:
        """Every rank gets the chief's ``stuff``."""
        if not self._group_ready():
            return stuff
        import torch.distributed as dist

        box = [stuff if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # ----- node-local collectives --------------------------------------------------------
    # Determined's local collectives involve only the ranks of one node, so ranks of other nodes
    # need not call them. A per-node process group keeps that true; with one node the world is
    # the node.
    def _local_group(self) -> Any:
        """The node's process group (None: the world, when there is one node)."""
        self._group_ready()
        if self.cross_size == 1:
            return None
        group = self._node_group() if self._node_group is not None else None
        if group is None:
            raise RuntimeError(
                f"{self!r} has no per-node process group for allgather_local()/gather_local()/"
                "broadcast_local(). Pass the context to det_lightning.pytorch.init("
                "distributed=...) or det_lightning.core.init(distributed=...), which create it "
                "on every rank (and torch.distributed.destroy_process_group() ends it)."
            )
        return group

    def allgather_local(self, stuff: Any) -> List:
        """Every rank gets the ``stuff`` of the ranks on its own node, in local-rank order."""
        if self.local_size < 2:
            return [stuff]
        import torch.distributed as dist

        out: List[Any] = [None] * self.local_size
        dist.all_gather_object(out, (self.local_rank, stuff), group=self._local_group())
        return [item for _, item in sorted(out, key=lambda pair: pair[0])]

    def gather_local(self, stuff: Any) -> Optional[List]:
        """The node's local chief gets the ``stuff`` of the node's ranks; others get None."""
        local = self.allgather_local(stuff)
        return local if self.local_rank == 0 else None

    def broadcast_local(self, stuff: Any = None) -> Any:
        """Every rank gets its node's local chief's ``stuff``."""
        if self.local_size < 2:
            return stuff
        return self.allgather_local(stuff)[0]

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, cross_rank={self.cross_rank}, "
            f"cross_size={self.cross_size})"
        )


def init_local_groups(distributed: DistributedContext) -> None:
    """Creates one process group per node for ``distributed``'s ``*_local`` collectives.

    Collective: every rank must call it (``torch.distributed.new_group`` is), right after
    the process group is set up. ``det_lightning.pytorch.init()`` and ``core.init()`` do.
    """
    if distributed.size < 2 or distributed.cross_size < 2 or not distributed._group_ready():
        return
    import torch.distributed as dist

    nodes = distributed.allgather(distributed.cross_rank)
    ranks_per_node = [
        [rank for rank, node in enumerate(nodes) if node == this] for this in sorted(set(nodes))
    ]
    node_group, _ = dist.new_subgroups_by_enumeration(ranks_per_node)
    distributed._node_group = weakref.ref(node_group)


class DummyDistributedContext(DistributedContext):
    """One process, no collectives."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
