"""The experiment seed: read from the experiment config and applied to every generator Determined
seeds (Python's, NumPy's, torch's), by ``init()`` and by ``LightningTrial`` alike."""

import random
from typing import Any, Dict, Optional

import numpy as np
import torch


def seed_all(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's global generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.random.manual_seed(seed)


def experiment_seed(exp_conf: Optional[Dict[str, Any]]) -> Optional[int]:
    """``reproducibility.experiment_seed`` of ``exp_conf``; None when it sets none.

    >>> experiment_seed({"reproducibility": {"experiment_seed": 7}}), experiment_seed(None)
    (7, None)

    Raises:
        ValueError: the seed is not an int >= 0.
    """
    seed = ((exp_conf or {}).get("reproducibility") or {}).get("experiment_seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise ValueError(
            f"exp_conf['reproducibility']['experiment_seed'] = {seed!r}: expected an int >= 0."
        )
    return seed
