"""``determined.TrialContext``: the base class of the trial contexts.

Trials annotate their constructor with it (``def __init__(self, context: det.TrialContext)``);
``pytorch.PyTorchTrialContext`` derives from it, so such annotations and isinstance checks hold.
As in Determined, the base holds what is independent of the framework: the configuration, the
trial's identity, where training resumes, and the stop request.
"""

import logging
from typing import Any, Dict, Optional

from det_lightning import errors
from det_lightning.core import DistributedContext, DummyDistributedContext

logger = logging.getLogger("det_lightning.pytorch")

NOT_CONFIGURED = (
    "is undefined in this Trial because {what} was not configured. "
    "Please check the init() call to Trainer API: pass init({arg}=...)."
)


class TrialContext:
    """The system-provided API to a trial; ``pytorch.PyTorchTrialContext`` is the one used.

    Args:
        hparams: the trial's hyperparameters.
        exp_conf: the experiment configuration, if any.
        distributed: this process's rank information.
        trial_seed: the configured seed, if any (``get_trial_seed()``).
        steps_completed: batches already trained when resuming (``get_initial_batch()``).
    """

    def __init__(
        self,
        hparams: Optional[Dict[str, Any]] = None,
        exp_conf: Optional[Dict[str, Any]] = None,
        distributed: Optional[DistributedContext] = None,
        trial_seed: Optional[int] = None,
        *,
        steps_completed: int = 0,
    ) -> None:
        self.distributed = distributed or DummyDistributedContext()
        self._hparams = hparams
        self._exp_conf = exp_conf
        self._trial_seed = trial_seed
        self._steps_completed = steps_completed
        self._stop_requested = False

    def get_hparams(self) -> Dict[str, Any]:
        if self._hparams is None:
            raise ValueError("hparams " + NOT_CONFIGURED.format(what="hparams", arg="hparams"))
        return self._hparams

    def get_hparam(self, name: str) -> Any:
        hparams = self.get_hparams()
        if name not in hparams:
            raise ValueError(
                f"Could not find name '{name}' in experiment hyperparameters. Available: "
                f"{sorted(hparams)}. Please check your experiment configuration "
                "'hyperparameters' section (or the hparams passed to init())."
            )
        if name == "global_batch_size":
            logger.warning(
                "Please use `context.get_per_slot_batch_size()` and "
                "`context.get_global_batch_size()` instead of accessing `global_batch_size` "
                "directly."
            )
        return hparams[name]

    def get_experiment_config(self) -> Dict[str, Any]:
        if self._exp_conf is None:
            raise ValueError(
                "exp_conf is undefined in this Trial. Please check the init() call to Trainer "
                "API: pass init(exp_conf=...)."
            )
        return self._exp_conf

    def get_data_config(self) -> Dict[str, Any]:
        return dict(self.get_experiment_config().get("data", {}) or {})

    def get_trial_seed(self) -> int:
        if self._trial_seed is None:
            raise errors.InternalException(
                "Trial seed not set: local training seeds nothing unless the experiment config "
                "sets reproducibility.experiment_seed (init(exp_conf={'reproducibility': "
                "{'experiment_seed': 42}}))."
            )
        return self._trial_seed

    def get_initial_batch(self) -> int:
        return self._steps_completed

    def get_experiment_id(self) -> int:
        return 0

    def get_trial_id(self) -> int:
        return 0

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the trainer to stop after the current batch, with a checkpoint."""
        if not isinstance(stop_requested, bool):
            raise TypeError(
                f"set_stop_requested({stop_requested!r}): stop_requested must be a boolean."
            )
        if stop_requested:
            logger.info(
                "A trial stoppage has been requested. The trial will be stopped at the end of "
                "the current batch, with a checkpoint."
            )
        self._stop_requested = stop_requested


__all__ = ["TrialContext"]
