"""Which run wrote a checkpoint, and whether this run may resume from it.

Every checkpoint's ``metadata.json`` records the run that wrote it under ``IDENTITY_KEY``::

    "det_lightning_identity": {
        "experiment_id": "mnist-3f2a9c01de",   # `det-lightning experiment`'s id, else null
        "trial": 1,                            # the trial's number in it, else null
        "trial_cls_spec": "model_def:MNistTrial",
        "hparams": {"lr": 0.1, ...}
    }

``latest`` considers only checkpoints whose identity is the run's; a checkpoint written before
identities existed (no such key) counts by its ``load_data.json``: the same trial class and
hyperparameters. A checkpoint named explicitly whose trial class or hyperparameters differ is
refused unless ``$DET_LIGHTNING_ALLOW_WARM_START=1`` asks for a warm start. A checkpoint the real
Determined wrote (another trial id) keeps Determined's rule: a warm start.
"""

import dataclasses
import json
import os
from typing import Any, Dict, Optional

from det_lightning._env import RUN_IDENTITY_ENV

IDENTITY_KEY = "det_lightning_identity"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What identifies a training run: its experiment and trial (a trial of ``det-lightning
    experiment``; None otherwise), its trial class and hyperparameters.

    >>> a = RunIdentity("m:T", {"lr": 0.1}, "exp-1", 1)
    >>> a.mismatch(a.to_metadata()) is None
    True
    >>> print(a.mismatch({**a.to_metadata(), "hparams": {"lr": 0.5}}))
    hyperparameters {"lr": 0.5}, not {"lr": 0.1}
    """

    trial_cls_spec: Optional[str]
    hparams: Any
    experiment_id: Optional[str] = None
    trial: Optional[int] = None

    @classmethod
    def of_run(cls, trial_cls_spec: Optional[str], hparams: Any) -> "RunIdentity":
        """This process's identity: the experiment and trial from ``$DET_LIGHTNING_RUN_IDENTITY``
        (set by ``det-lightning experiment`` for its trials)."""
        raw = os.environ.get(RUN_IDENTITY_ENV)
        given: Dict[str, Any] = json.loads(raw) if raw else {}
        return cls(trial_cls_spec, hparams, given.get("experiment_id"), given.get("trial"))

    def to_metadata(self) -> Dict[str, Any]:
        """The value of ``metadata.json``'s ``IDENTITY_KEY``."""
        return dataclasses.asdict(self)

    def mismatch(self, saved: Dict[str, Any], *, with_experiment: bool = True) -> Optional[str]:
        """How the identity ``saved`` differs from this run's (None: it is this run's). A saved
        identity without an experiment (an old checkpoint's) is compared by trial class and
        hyperparameters only; ``with_experiment=False`` compares only those."""
        differences = []
        if with_experiment and "experiment_id" in saved:
            for key, label in (("experiment_id", "experiment"), ("trial", "trial")):
                if saved.get(key) != getattr(self, key):
                    differences.append(f"{label} {saved.get(key)}, not {getattr(self, key)}")
        if saved.get("trial_cls_spec") != self.trial_cls_spec:
            differences.append(
                f"trial class {saved.get('trial_cls_spec')}, not {self.trial_cls_spec}"
            )
        if _canonical(saved.get("hparams")) != _canonical(self.hparams):
            differences.append(
                f"hyperparameters {_canonical(saved.get('hparams'))}, not "
                f"{_canonical(self.hparams)}"
            )
        return "; ".join(differences) or None


def saved_identity(metadata: Dict[str, Any], load_data: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The identity a checkpoint records: its metadata's, else (a checkpoint written before
    identities) the trial class and hyperparameters of its ``load_data.json``.

    >>> saved_identity({}, {"trial_cls_spec": "m:T", "hparams": {"lr": 1}})
    {'trial_cls_spec': 'm:T', 'hparams': {'lr': 1}}
    """
    recorded = metadata.get(IDENTITY_KEY)
    if isinstance(recorded, dict):
        return recorded
    load_data = load_data or {}
    return {"trial_cls_spec": load_data.get("trial_cls_spec"), "hparams": load_data.get("hparams")}


__all__ = ["IDENTITY_KEY", "RunIdentity", "saved_identity"]
