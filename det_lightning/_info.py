"""Cluster information: none for a plain local run; a trial's, for a search's command trials.

A script written for Determined's Trainer API branches on ``det.get_cluster_info()``: ``None``
means "local, pick your own hyperparameters". When ``det-lightning experiment`` runs such a
script as one trial of a search, it passes the trial's hyperparameters, id and checkpoint in
``$DET_LIGHTNING_TRIAL_INFO``, and the script takes its cluster branch (``info.trial.hparams``,
``info.latest_checkpoint``), as on a Determined cluster.
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from det_lightning._env import NODE_SLOTS_ENV, TRIAL_INFO_ENV
from det_lightning._refused_attributes import RefusedAttribute
from det_lightning.errors import NotProvidedAttributeError


@dataclasses.dataclass(frozen=True)
class TrialInfo:
    """The part of Determined's ``TrialInfo`` a trial script reads."""

    trial_id: int
    experiment_id: int
    hparams: Dict[str, Any]
    config: Dict[str, Any]
    trial_seed: int = 0


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """The part of Determined's ``ClusterInfo`` a trial script reads."""

    trial: TrialInfo
    latest_checkpoint: Optional[str] = None
    task_type: str = "TRIAL"
    cluster_id: str = "det-lightning"
    master_url: str = ""

    # Determined's cluster-only parts: reading one raises, naming what to use.
    agent_id = RefusedAttribute("ClusterInfo")
    gpu_uuids = RefusedAttribute("ClusterInfo")
    task_id = RefusedAttribute("ClusterInfo")
    allocation_id = RefusedAttribute("ClusterInfo")
    session_token = RefusedAttribute("ClusterInfo")

    # The trial's layout on this machine, which a launcher-style script reads to start a
    # worker per slot (core_api/4_distributed.py): one container, the machine.
    @property
    def slot_ids(self) -> List[int]:
        """``[0, ..., slots_per_trial - 1]``, the trial's slots on this machine."""
        return list(range(_node_slots("slot_ids")))

    @property
    def container_addrs(self) -> List[str]:
        """``["127.0.0.1"]``, the one container (this machine), where the chief runs."""
        _node_slots("container_addrs")
        return ["127.0.0.1"]

    @property
    def container_slot_counts(self) -> List[int]:
        """``[slots_per_trial]``, the one container's slots."""
        return [_node_slots("container_slot_counts")]

    @property
    def container_rank(self) -> int:
        """0, the one container's index."""
        _node_slots("container_rank")
        return 0

    @property
    def user_data(self) -> Dict[str, Any]:
        """The experiment config's ``data`` section, as Determined's."""
        data = self.trial.config.get("data")
        return data if isinstance(data, dict) else {}

    def to_environment(self) -> str:
        """The value of ``$DET_LIGHTNING_TRIAL_INFO`` that stands for this info."""
        return json.dumps(dataclasses.asdict(self), default=str)


def _node_slots(name: str) -> int:
    """The trial's slots on this machine (``$DET_LIGHTNING_NODE_SLOTS``, which a
    ``det-lightning experiment`` command trial on one machine has).

    Raises:
        errors.NotProvidedAttributeError: a trial on several machines, or no such trial.
    """
    slots = os.environ.get(NODE_SLOTS_ENV, "")
    if slots.isdigit():
        return int(slots)
    raise NotProvidedAttributeError(
        f"ClusterInfo.{name} is not provided by det_lightning here: it describes the trial's "
        "machine, known in a `det-lightning experiment` trial on one machine (not one of "
        "several nodes). Read the ranks from core_context.distributed "
        "(DistributedContext.from_torch_distributed()) or context.distributed.",
        name=name,
    )


def get_cluster_info() -> Optional[ClusterInfo]:
    """None for a local run; the trial's info inside a search's command trial.

    >>> os.environ.pop(TRIAL_INFO_ENV, None) and None
    >>> get_cluster_info() is None
    True
    >>> info = ClusterInfo(TrialInfo(3, 0, {"lr": 0.1}, {}), latest_checkpoint="/c/x")
    >>> os.environ[TRIAL_INFO_ENV] = info.to_environment()
    >>> got = get_cluster_info(); del os.environ[TRIAL_INFO_ENV]
    >>> got == info, got.trial.hparams["lr"]
    (True, 0.1)
    """
    raw = os.environ.get(TRIAL_INFO_ENV)
    if not raw:
        return None
    data = json.loads(raw)
    return ClusterInfo(**{**data, "trial": TrialInfo(**data["trial"])})
