"""The client's values: Determined's enums (states, sort fields, orders), its not-found errors,
and ``refuse`` for what needs a master."""

import dataclasses
import datetime
import enum
from typing import Any, Dict, List, NoReturn, Optional

_NO_MASTER = (
    "det_lightning has no master: experiments are the folders under the checkpoint directory "
    "(`det-lightning experiment list`)."
)


def refuse(name: str, instead: str = "") -> NoReturn:
    """Raises for a client feature that needs Determined's master, naming what to use."""
    raise NotImplementedError(
        f"determined.experimental.client: {name} needs a Determined master. {_NO_MASTER}"
        + (f" {instead}" if instead else "")
    )


class NotFoundException(LookupError):
    """An experiment or trial that is not under the checkpoint directory (Determined's client
    raised ``api.errors.NotFoundException``); the message lists what is there."""


class ExperimentNotFound(NotFoundException):
    pass


class TrialNotFound(NotFoundException):
    pass


class OrderBy(enum.Enum):
    """Ascending or descending order of a sorted list."""

    ASCENDING = "ORDER_BY_ASC"
    ASC = "ORDER_BY_ASC"
    DESCENDING = "ORDER_BY_DESC"
    DESC = "ORDER_BY_DESC"


class ExperimentState(enum.Enum):
    """Determined's experiment states; locally ACTIVE (a trial trains), PAUSED (stopped before
    its end: rerun its command, or ``activate()``), COMPLETED, ERROR (its process failed)."""

    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    DELETING = "STATE_DELETING"
    DELETE_FAILED = "STATE_DELETE_FAILED"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    QUEUED = "STATE_QUEUED"
    PULLING = "STATE_PULLING"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"


TERMINAL_STATES = {
    ExperimentState.COMPLETED,
    ExperimentState.CANCELED,
    ExperimentState.DELETED,
    ExperimentState.ERROR,
}


class TrialState(enum.Enum):
    """Determined's trial states; locally RUNNING, PAUSED (interrupted: its experiment's rerun
    resumes it), COMPLETED (also stopped early by ASHA), ERROR, CANCELED (it raised InvalidHP)."""

    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    CANCELED = "STATE_CANCELED"
    COMPLETED = "STATE_COMPLETED"
    ERROR = "STATE_ERROR"
    QUEUED = "STATE_QUEUED"
    PULLING = "STATE_PULLING"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"


# TrialResult.status -> TrialState
TRIAL_STATES = {
    "COMPLETED": TrialState.COMPLETED,
    "STOPPED_EARLY": TrialState.COMPLETED,
    "ERROR": TrialState.ERROR,
    "INVALID_HP": TrialState.CANCELED,
    "RUNNING": TrialState.RUNNING,
    "INTERRUPTED": TrialState.PAUSED,
}


class TrialSortBy(enum.Enum):
    """The fields a list of trials sorts on; locally ID, STATE, BEST_VALIDATION_METRIC and
    BATCHES_PROCESSED are known."""

    ID = "SORT_BY_ID"
    START_TIME = "SORT_BY_START_TIME"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    BEST_VALIDATION_METRIC = "SORT_BY_BEST_VALIDATION_METRIC"
    LATEST_VALIDATION_METRIC = "SORT_BY_LATEST_VALIDATION_METRIC"
    BATCHES_PROCESSED = "SORT_BY_BATCHES_PROCESSED"
    DURATION = "SORT_BY_DURATION"
    RESTARTS = "SORT_BY_RESTARTS"
    CHECKPOINT_SIZE = "SORT_BY_CHECKPOINT_SIZE"
    LOG_RETENTION_DAYS = "SORT_BY_LOG_RETENTION_DAYS"


class ExperimentSortBy(enum.Enum):
    """The fields a list of experiments sorts on; locally ID, START_TIME, NAME and STATE."""

    ID = "SORT_BY_ID"
    DESCRIPTION = "SORT_BY_DESCRIPTION"
    START_TIME = "SORT_BY_START_TIME"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    NUM_TRIALS = "SORT_BY_NUM_TRIALS"
    PROGRESS = "SORT_BY_PROGRESS"
    USER = "SORT_BY_USER"
    NAME = "SORT_BY_NAME"
    FORKED_FROM = "SORT_BY_FORKED_FROM"
    RESOURCE_POOL = "SORT_BY_RESOURCE_POOL"
    PROJECT_ID = "SORT_BY_PROJECT_ID"
    CHECKPOINT_SIZE = "SORT_BY_CHECKPOINT_SIZE"
    CHECKPOINT_COUNT = "SORT_BY_CHECKPOINT_COUNT"
    SEARCHER_METRIC_VAL = "SORT_BY_SEARCHER_METRIC_VAL"


class CheckpointState(enum.Enum):
    ACTIVE = "STATE_ACTIVE"
    COMPLETED = "STATE_COMPLETED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    PARTIALLY_DELETED = "STATE_PARTIALLY_DELETED"


class CheckpointSortBy(enum.Enum):
    """The fields a list of checkpoints sorts on (or a validation metric's name)."""

    UUID = "SORT_BY_UUID"
    TRIAL_ID = "SORT_BY_TRIAL_ID"
    BATCH_NUMBER = "SORT_BY_BATCH_NUMBER"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    SEARCHER_METRIC = "SORT_BY_SEARCHER_METRIC"


class DownloadMode(enum.Enum):
    """How a checkpoint is downloaded; locally always straight from its storage."""

    DIRECT = "direct"
    MASTER = "master"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class TrialMetrics:
    """One metrics report of a trial, as Determined's: ``steps_completed`` (batches),
    ``end_time``, ``metrics``, ``group`` (``"validation"``)."""

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: datetime.datetime
    metrics: Dict[str, Any]
    group: str
    batch_metrics: Optional[List[Dict[str, Any]]] = None

    @property
    def total_batches(self) -> int:
        """The batches trained (Determined's deprecated name for ``steps_completed``)."""
        return self.steps_completed


class ModelFramework(enum.Enum):
    PYTORCH = 1
    TENSORFLOW = 2


METRICS_INSTEAD = (
    "A search keeps each trial's validations (Trial.iter_metrics('validation')); training "
    "metrics are in the trial's TensorBoard files (tensorboard/<experiment id>/trial-<n>), "
    "which `tensorboard --logdir tensorboard` shows and tensorboard's EventAccumulator reads."
)


__all__ = [
    "CheckpointSortBy",
    "CheckpointState",
    "DownloadMode",
    "ExperimentNotFound",
    "ExperimentSortBy",
    "ExperimentState",
    "METRICS_INSTEAD",
    "ModelFramework",
    "NotFoundException",
    "OrderBy",
    "TERMINAL_STATES",
    "TRIAL_STATES",
    "TrialMetrics",
    "TrialNotFound",
    "TrialSortBy",
    "TrialState",
    "refuse",
]
