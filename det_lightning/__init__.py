"""det_lightning: Determined AI's ``determined.pytorch`` API on PyTorch Lightning's Trainer.

Change ``import determined as det`` to ``import det_lightning as det`` (or call
``det_lightning.compat.install()``) and a ``PyTorchTrial`` trains under ``lightning.Trainer``.
"""

from det_lightning import core, errors, launch, pytorch, tensorboard, util
from det_lightning._import import import_from_path
from det_lightning._info import ClusterInfo, TrialInfo, get_cluster_info
from det_lightning._refused import module_getattr
from det_lightning._trial_context import TrialContext
from det_lightning.errors import InvalidHP

__version__ = "0.1.0"

# The same format Determined logs with, so log tooling keeps working.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

# Determined's names det_lightning refuses (``determined.LegacyTrial``, ``determined.keras``)
# raise errors.NotProvidedError saying why and what to use (det_lightning/_refused.py).
__getattr__ = module_getattr(__name__)

__all__ = [
    "ClusterInfo",
    "InvalidHP",
    "LOG_FORMAT",
    "TrialContext",
    "TrialInfo",
    "core",
    "errors",
    "get_cluster_info",
    "import_from_path",
    "launch",
    "pytorch",
    "tensorboard",
    "util",
]
