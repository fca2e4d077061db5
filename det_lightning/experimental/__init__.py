"""``determined.experimental``: the client (``client``) over the experiments, trials and
checkpoints under the checkpoint directory, without a master; see ``client``. The model
registry and Determined's Core API v2 are refused (``det_lightning/_refused.py``).
"""

from det_lightning._refused import module_getattr
from det_lightning.experimental import client
from det_lightning.experimental.client import (
    Checkpoint,
    CheckpointSortBy,
    Determined,
    Experiment,
    ExperimentSortBy,
    Model,
    ModelVersion,
    OrderBy,
    Project,
    Trial,
    TrialSortBy,
)

ExperimentReference = Experiment  # Determined's name for one fetched by id
TrialReference = Trial
TrialOrderBy = OrderBy  # deprecated in Determined for OrderBy

__getattr__ = module_getattr(__name__)

__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "Determined",
    "Experiment",
    "ExperimentReference",
    "ExperimentSortBy",
    "Model",
    "ModelVersion",
    "OrderBy",
    "Project",
    "Trial",
    "TrialOrderBy",
    "TrialReference",
    "TrialSortBy",
    "client",
]
