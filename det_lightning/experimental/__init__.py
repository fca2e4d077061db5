"""``determined.experimental``: importable, so trials and scripts that import it load.

Everything here talks to a Determined master (experiments, trials, the model registry), which a
local det_lightning run does not have: using a name raises ``NotImplementedError`` that names the
local alternative. See ``client``.
"""

from det_lightning.experimental import client
from det_lightning.experimental.client import (
    Checkpoint,
    Determined,
    Experiment,
    Model,
    ModelVersion,
    Project,
    Trial,
)

__all__ = [
    "Checkpoint",
    "Determined",
    "Experiment",
    "Model",
    "ModelVersion",
    "Project",
    "Trial",
    "client",
]
