"""``determined.experimental.client``, without a master: the experiments, trials and
checkpoints under the checkpoint directory, read from the files they left.

Determined's post-training code runs unchanged::

    from determined.experimental import client
    from determined import pytorch

    exp = client.create_experiment(config="const.yaml", model_dir=".")  # starts it
    exp.wait()
    best = exp.list_checkpoints(max_results=1)[0]   # by the searcher metric, best first
    trial = pytorch.load_trial_from_checkpoint_path(best.download(), trial_class=MyTrial)

Ids are det_lightning's: an experiment's is a name (``det-lightning experiment list``), a
trial's ``"<experiment id>/<n>"``. A trial's validations are the ones its search
kept (``Trial.iter_metrics("validation")``). What needs a master (users, workspaces, the model
registry, logs, training metrics) raises ``NotImplementedError`` naming what to use. The
module functions use one ``Determined()`` over ``$DET_LIGHTNING_CHECKPOINT_DIR`` (else
``./checkpoints``); ``Determined(checkpoint_dir=..., storage=...)`` reads another.
"""

import logging
import pathlib
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

from det_lightning._refused import module_getattr
from det_lightning.experimental._checkpoint import Checkpoint, CheckpointTrainingMetadata
from det_lightning.experimental._determined import Determined
from det_lightning.experimental._experiment import Experiment
from det_lightning.experimental._trial import Trial
from det_lightning.experimental._values import (
    TERMINAL_STATES,
    CheckpointSortBy,
    CheckpointState,
    DownloadMode,
    ExperimentNotFound,
    ExperimentSortBy,
    ExperimentState,
    ModelFramework,
    NotFoundException,
    OrderBy,
    TrialMetrics,
    TrialNotFound,
    TrialSortBy,
    TrialState,
    refuse,
)

logger = logging.getLogger("determined.client")
_determined: Optional[Determined] = None


def _client() -> Determined:
    global _determined
    if _determined is None:
        _determined = Determined()
    return _determined


def login(  # noqa: PLR0917  Determined's signature
    master: Optional[str] = None,
    user: Optional[str] = None,
    password: Optional[str] = None,
    cert_path: Optional[str] = None,
    cert_name: Optional[str] = None,
    noverify: bool = False,
) -> None:
    """Accepted, as Determined's (before any other call); there is no master to log in to."""
    global _determined
    if _determined is not None:
        raise ValueError(
            "You can only call login() once, before any other calls to any functions in the "
            "client module; use explicit client.Determined() objects for several."
        )
    _determined = Determined(master, user, password, cert_path, cert_name, noverify)


def logout() -> None:
    """Forgets the module's ``Determined()``."""
    global _determined
    _determined = None


def create_experiment(  # noqa: PLR0917  Determined's signature
    config: Union[str, pathlib.Path, Dict[str, Any]],
    model_dir: Optional[str] = None,
    includes: Optional[Iterable[Union[str, pathlib.Path]]] = None,
    project_id: Optional[int] = None,
    template: Optional[str] = None,
) -> Experiment:
    """Starts ``det-lightning experiment CONFIG MODEL_DIR`` in its own process
    (``Determined.create_experiment``)."""
    return _client().create_experiment(config, model_dir, includes, project_id, template)


def get_experiment(experiment_id: Any) -> Experiment:
    """The experiment with this id (``det-lightning experiment list`` shows them)."""
    return _client().get_experiment(experiment_id)


def list_experiments(  # noqa: PLR0917  Determined's signature
    sort_by: Optional[ExperimentSortBy] = None,
    order_by: Optional[OrderBy] = None,
    experiment_ids: Optional[List[Any]] = None,
    labels: Optional[List[str]] = None,
    users: Optional[List[str]] = None,
    states: Optional[List[ExperimentState]] = None,
    name: Optional[str] = None,
    project_id: Optional[int] = None,
) -> List[Experiment]:
    """The experiments under the checkpoint directory."""
    return _client().list_experiments(
        sort_by=sort_by,
        order_by=order_by,
        experiment_ids=experiment_ids,
        labels=labels,
        users=users,
        states=states,
        name=name,
        project_id=project_id,
    )


def get_trial(trial_id: Any) -> Trial:
    """The trial ``"<experiment id>/<n>"`` (or ``n``, where one experiment has a trial n)."""
    return _client().get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    """The checkpoint named ``uuid`` under the checkpoint directory."""
    return _client().get_checkpoint(uuid)


class _NeedsMaster:
    """A client class of a master's objects: usable in annotations and isinstance checks,
    never constructed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        refuse(type(self).__name__)


class Model(_NeedsMaster):
    pass


class ModelVersion(_NeedsMaster):
    pass


class Project(_NeedsMaster):
    pass


class Workspace(_NeedsMaster):
    pass


class User(_NeedsMaster):
    pass


class ResourcePool(_NeedsMaster):
    pass


def iter_trials_metrics(trial_ids: List[Any], group: str) -> Iterator[TrialMetrics]:
    """The validations the search kept for each of ``trial_ids`` (``group="validation"``),
    trial by trial (``Trial.iter_metrics``)."""
    return _client().iter_trials_metrics(trial_ids, group)


def stream_trials_metrics(trial_ids: List[Any], group: str) -> Iterator[TrialMetrics]:
    warnings.warn(
        "client.stream_trials_metrics is deprecated. Use client.iter_trials_metrics instead",
        FutureWarning,
        stacklevel=2,
    )
    return iter_trials_metrics(trial_ids, group=group)


def stream_trials_validation_metrics(trial_ids: List[Any]) -> Iterator[TrialMetrics]:
    warnings.warn(
        "client.stream_trials_validation_metrics() has been deprecated; call "
        "client.iter_trials_metrics() with group 'validation'",
        FutureWarning,
        stacklevel=2,
    )
    return iter_trials_metrics(trial_ids, group="validation")


# users, workspaces, models: errors.NotProvidedError naming what to use (_refused.py)
__getattr__ = module_getattr(__name__)


__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointTrainingMetadata",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentNotFound",
    "ExperimentSortBy",
    "ExperimentState",
    "Model",
    "ModelFramework",
    "ModelVersion",
    "NotFoundException",
    "OrderBy",
    "Project",
    "ResourcePool",
    "TERMINAL_STATES",
    "Trial",
    "TrialMetrics",
    "TrialNotFound",
    "TrialSortBy",
    "TrialState",
    "User",
    "Workspace",
    "create_experiment",
    "get_checkpoint",
    "get_experiment",
    "get_trial",
    "iter_trials_metrics",
    "list_experiments",
    "login",
    "logout",
    "stream_trials_metrics",
    "stream_trials_validation_metrics",
]
