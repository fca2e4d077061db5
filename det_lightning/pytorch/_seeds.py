"""The experiment seed (``ReproducibilityConfig.experiment_seed``) applied to every generator
Determined seeds (Python's, NumPy's, torch's), by ``init()`` and by ``LightningTrial`` alike."""

import random

import numpy as np
import torch

MAX_EXPERIMENT_SEED = (1 << 32) - 1  # Determined's master reads experiment_seed as a uint32


def seed_all(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's global generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.random.manual_seed(seed)
