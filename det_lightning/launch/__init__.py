"""``determined.launch``: ``torch_distributed``, run locally through ``det-lightning run``.

Determined's other launchers (horovod, deepspeed, tensorflow, wrap_rank) raise
``errors.NotProvidedError`` naming what to use (``det_lightning/_refused.py``).
"""

from det_lightning._refused import module_getattr

__getattr__ = module_getattr(__name__)

__all__ = ["torch_distributed"]  # noqa: F822  a submodule, not a name defined here
