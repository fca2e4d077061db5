"""``det_lightning.core``: the part of ``determined.core`` a PyTorchTrial touches."""

from det_lightning._refused import module_getattr
from det_lightning.core._distributed import DistributedContext, DummyDistributedContext

# The rest of determined.core (contexts that talk to a master) raises NotProvidedError.
__getattr__ = module_getattr(__name__)

__all__ = ["DistributedContext", "DummyDistributedContext"]
