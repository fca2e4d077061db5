"""``det_lightning.core``: Determined's Core API in local mode (``core.init()``), and the
``DistributedContext`` a PyTorchTrial's context carries."""

from det_lightning._refused import module_getattr
from det_lightning.core._distributed import DistributedContext, DummyDistributedContext
from det_lightning.core._modes import (
    DownloadMode,
    EarlyExitReason,
    PreemptMode,
    SearcherMode,
    TensorboardMode,
    Unit,
)
from det_lightning.core._checkpoint import CheckpointContext, DummyCheckpointContext
from det_lightning.core._searcher import (
    DummyPreemptContext,
    DummySearcherContext,
    DummySearcherOperation,
    PreemptContext,
    SearcherContext,
    SearcherOperation,
)
from det_lightning.core._train import DummyTrainContext, TrainContext
from det_lightning.core._context import Context, init

# The rest of determined.core (profiler, experimental parts, ...) raises NotProvidedError.
__getattr__ = module_getattr(__name__)

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyCheckpointContext",
    "DummyDistributedContext",
    "DummyPreemptContext",
    "DummySearcherContext",
    "DummySearcherOperation",
    "DummyTrainContext",
    "EarlyExitReason",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
]
