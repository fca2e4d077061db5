"""``determined.launch``: ``torch_distributed``, run locally through ``det-lightning run``,
and ``wrap_rank``, which prefixes a worker's output with its rank.

Determined's other launchers (horovod, deepspeed, tensorflow) raise
``errors.NotProvidedError`` naming what to use (``det_lightning/_refused.py``).
"""

from det_lightning._refused import module_getattr

__getattr__ = module_getattr(__name__)

__all__ = ["torch_distributed", "wrap_rank"]  # noqa: F822  submodules, not names defined here
