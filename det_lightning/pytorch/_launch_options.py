"""Launch options as values: what ``init()`` resolved (``LaunchOptions``) and what the launch
gave it (``Launched``). Reading them from a command line or the environment, and starting the
processes, is ``_launch.py``'s job; this module imports nothing that starts Lightning, so the
context, the results and the adapters can all use these types."""

import dataclasses
from typing import Any, Dict, Mapping, Optional

import torch

from det_lightning.core import DistributedContext

# Lightning Trainer options of the same names; ``deterministic`` is also applied by init() itself
# (``_determinism``), before the launch.
LAUNCH_OPTIONS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "deterministic")


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """Lightning's launch options for this job, resolved; None means Lightning's default.

    >>> LaunchOptions.of({"devices": 2, "precision": None}).trainer_kwargs()
    {'devices': 2}
    """

    accelerator: Optional[str] = None
    devices: Any = None
    num_nodes: Optional[int] = None
    strategy: Any = None
    precision: Any = None
    deterministic: Optional[bool] = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> "LaunchOptions":
        """From ``resolve_options``'s dict."""
        return cls(**{name: options.get(name) for name in LAUNCH_OPTIONS})

    def trainer_kwargs(self) -> Dict[str, Any]:
        """The options that were given, as ``lightning.Trainer`` keyword arguments."""
        given = {name: getattr(self, name) for name in LAUNCH_OPTIONS}
        return {name: value for name, value in given.items() if value is not None}


@dataclasses.dataclass(frozen=True)
class Launched:
    """What ``init()`` gets from the launch: who this process is, and where it computes.

    Args:
        distributed: this process's ranks (collectives ready when there are several).
        device: where ``wrap_model`` and ``to_device`` put things.
        options: the launch options for the ``lightning.Trainer`` that ``fit()`` builds.
    """

    distributed: DistributedContext
    device: torch.device
    options: LaunchOptions
