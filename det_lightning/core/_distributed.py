"""``DistributedContext``: who this process is, and object collectives over ``torch.distributed``.

Determined runs its own ZMQ sockets for these; we use the process group that Lightning's strategy
(or the user) already set up, so there is one communication layer.
"""

import os
from typing import Any, List, Optional


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
        chief_ip: accepted for compatibility; the process group already knows its peers.
        pub_port, pull_port, port_offset, force_tcp: accepted for compatibility, unused.
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
            raise ValueError(f"DistributedContext(rank={rank}, size={size}): need 0 <= rank < size.")
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

    # ----- constructors -------------------------------------------------------------------
    @classmethod
    def from_torch_distributed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From the variables torchrun (or Lightning's launcher) sets: RANK, WORLD_SIZE, LOCAL_RANK,
        LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE."""
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
        """Nothing to close: the process group belongs to Lightning's strategy or the user."""

    # ----- collectives --------------------------------------------------------------------
    def _group_ready(self) -> bool:
        if self.size == 1:
            return False
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                f"DistributedContext(size={self.size}) needs an initialized torch.distributed "
                "process group for its collectives. Under det_lightning the Trainer sets it up; "
                "when you build the context yourself, call "
                "torch.distributed.init_process_group() first."
            )
        return True

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

    def _node_slice(self, everything: List) -> List:
        nodes = self.allgather_nodes() if self.size > 1 else [0]
        return [item for item, node in zip(everything, nodes) if node == self.cross_rank]

    def allgather_nodes(self) -> List[int]:
        if not hasattr(self, "_nodes"):
            self._nodes = self.allgather(self.cross_rank)
        return self._nodes

    def allgather_local(self, stuff: Any) -> List:
        """Every rank gets the ``stuff`` of the ranks on its own node, in local-rank order."""
        return self._node_slice(self.allgather(stuff))

    def gather_local(self, stuff: Any) -> Optional[List]:
        """The node's local chief gets the ``stuff`` of the node's ranks; others get None."""
        local = self.allgather_local(stuff)
        return local if self.local_rank == 0 else None

    def broadcast_local(self, stuff: Any = None) -> Any:
        """Every rank gets its node's local chief's ``stuff``."""
        everything = self.allgather((self.local_rank == 0, stuff))
        for (is_local_chief, item) in self._node_slice(everything):
            if is_local_chief:
                return item
        raise RuntimeError("No local chief (local_rank 0) found on this node.")

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, cross_rank={self.cross_rank}, "
            f"cross_size={self.cross_size})"
        )


class DummyDistributedContext(DistributedContext):
    """One process, no collectives."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
