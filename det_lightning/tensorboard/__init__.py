"""``determined.tensorboard``: the names trials import from it."""

from det_lightning._refused import module_getattr
from det_lightning.tensorboard import metric_writers

# Determined's TensorBoard sync managers raise NotProvidedError naming the local directory.
__getattr__ = module_getattr(__name__)

__all__ = ["metric_writers"]
