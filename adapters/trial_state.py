"""``TrialProgress``: how far a trial has trained, the one progress object the engine reads.

It is Determined's ``_TrialState`` (what ``trial_state.pkl`` holds), typed::

    TrialModule.training_step     batches_trained, epochs_trained after each batch
    ScheduleCallback, TrialHooks  batches_trained, validation_is_current(), the workload metrics
    CheckpointManager             checkpoint_is_current(); trial_state() into trial_state.pkl
    LightningTrial                trial_state() into Lightning's .ckpt, restored from it

Lightning keeps its own counters (``global_step``, the loops' progress); ``lightning_trainer.py``
aligns them with this object once, after a resume.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional

from det_lightning.pytorch import _checkpoint as ckpt

_COUNTERS = ("batches_trained", "epochs_trained", "last_val", "last_ckpt")


@dataclasses.dataclass
class TrialProgress:
    """Batches and epochs trained, and the batch of the last validation and checkpoint.

    >>> p = TrialProgress.from_trial_state({"batches_trained": 8, "last_val": 8, "trial_id": 3})
    >>> p.validation_is_current(), p.checkpoint_is_current(), p.trial_state()["trial_id"]
    (True, False, 3)
    """

    batches_trained: int = 0
    epochs_trained: int = 0
    last_val: int = 0
    last_ckpt: int = 0
    # Whatever else the saved _TrialState held (trial_id, step_id): written back unchanged.
    other: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # The per-batch metrics of the training workload running now (since the last report).
    workload_metrics: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    @classmethod
    def from_trial_state(cls, saved: Optional[Mapping[str, Any]] = None) -> "TrialProgress":
        """From a ``_TrialState`` dict (None: a trial that has not trained yet)."""
        values = {**ckpt.new_trial_state(), **(saved or {})}
        progress = cls(other=values)
        for name in _COUNTERS:
            setattr(progress, name, int(values.pop(name)))
        return progress

    def trial_state(self) -> Dict[str, Any]:
        """The ``_TrialState`` dict, keys in Determined's order."""
        values = {**ckpt.new_trial_state(), **self.other}
        values.update({name: getattr(self, name) for name in _COUNTERS})
        return values

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Takes the counts of a saved ``_TrialState`` (``LightningTrial``'s resume)."""
        restored = self.from_trial_state(saved)
        for name in _COUNTERS:
            setattr(self, name, getattr(restored, name))
        self.other = restored.other

    def validation_is_current(self) -> bool:
        return self.last_val == self.batches_trained

    def checkpoint_is_current(self) -> bool:
        return self.last_ckpt == self.batches_trained
