"""``det_lightning.pytorch``: the ``determined.pytorch`` API, run on Lightning."""

from det_lightning.pytorch import samplers
from det_lightning.pytorch._callback import PyTorchCallback
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning._refused import module_getattr
from det_lightning.pytorch._data import (
    DataLoader,
    TorchData,
    adapt_batch_sampler,
    data_length,
)
from det_lightning.pytorch._experimental import PyTorchExperimentalContext
from det_lightning.pytorch._export import export_lightning_checkpoint, to_lightning_checkpoint
from det_lightning.pytorch._launch import add_launch_arguments, launch_kwargs
from det_lightning.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
from det_lightning.pytorch._lr_scheduler import LRScheduler

# ``_SimpleReducer`` is private in Determined too, but exported there and subclassed by trials.
from det_lightning.pytorch._reducer import MetricReducer, Reducer
from det_lightning.pytorch._reducer import _SimpleReducer as _SimpleReducer
from det_lightning.pytorch._to_device import to_device
from det_lightning.pytorch._trainer import Trainer, init
from det_lightning.pytorch._trial import PyTorchTrial
from det_lightning.pytorch._units import Batch, Epoch, TrainUnit

# determined.pytorch.deepspeed and .experimental raise NotProvidedError naming what to use.
__getattr__ = module_getattr(__name__)

__all__ = [
    "Batch",
    "CheckpointLoadContext",
    "DataLoader",
    "Epoch",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchExperimentalContext",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Reducer",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "adapt_batch_sampler",
    "add_launch_arguments",
    "data_length",
    "export_lightning_checkpoint",
    "init",
    "launch_kwargs",
    "load_trial_from_checkpoint_path",
    "samplers",
    "to_device",
    "to_lightning_checkpoint",
]
