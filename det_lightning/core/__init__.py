"""``det_lightning.core``: Determined's Core API in local mode (``core.init()``), and the
``DistributedContext`` a PyTorchTrial's context carries."""

from typing import TYPE_CHECKING, Any

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

# The rest of determined.core (SearcherContextMissing) raises NotProvidedError.
if TYPE_CHECKING:
    from det_lightning.core._experimental import (
        DummyExperimentalCoreContext,
        ExperimentalCoreContext,
    )
    from det_lightning.core._profiler import DummyProfilerContext, ProfilerContext

_refused_getattr = module_getattr(__name__)
# Read when first named (they stay out of det-lightning --help's imports).
_LAZY = {
    "ProfilerContext": "_profiler",
    "DummyProfilerContext": "_profiler",
    "ExperimentalCoreContext": "_experimental",
    "DummyExperimentalCoreContext": "_experimental",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    return _refused_getattr(name)


__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyCheckpointContext",
    "DummyDistributedContext",
    "DummyExperimentalCoreContext",
    "DummyPreemptContext",
    "DummyProfilerContext",
    "DummySearcherContext",
    "DummySearcherOperation",
    "DummyTrainContext",
    "EarlyExitReason",
    "ExperimentalCoreContext",
    "PreemptContext",
    "PreemptMode",
    "ProfilerContext",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
]
