"""``det_lightning.core``: the part of ``determined.core`` a PyTorchTrial touches."""

from det_lightning.core._distributed import DistributedContext, DummyDistributedContext

__all__ = ["DistributedContext", "DummyDistributedContext"]
