"""``determined.experimental``: the client (``client``) over the experiments, trials and
checkpoints under the checkpoint directory, without a master; see ``client``.
"""

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

__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "Determined",
    "Experiment",
    "ExperimentSortBy",
    "Model",
    "ModelVersion",
    "OrderBy",
    "Project",
    "Trial",
    "TrialSortBy",
    "client",
]
