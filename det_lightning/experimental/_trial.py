"""``Trial``: one trial of an experiment, from its search storage; its checkpoints."""

from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    List,
    NoReturn,
    Optional,
    Union,
)

from det_lightning.experimental._checkpoint import (
    Checkpoint,
    best_first,
    deprecated,
    listed,
)
from det_lightning.experimental._values import (
    METRICS_INSTEAD,
    TRIAL_STATES,
    CheckpointSortBy,
    OrderBy,
    TrialState,
    refuse,
)

if TYPE_CHECKING:
    from det_lightning._runner.trial import TrialResult
    from det_lightning.experimental._experiment import Experiment


class Trial:
    """A trial of an experiment.

    Attributes:
        id: its number in the experiment (1, 2, ...).
        experiment_id: its experiment's id.
        hparams: its hyperparameters.
        state: a ``TrialState``.
        summary_metrics: ``{"validation_metrics": {metric: {"min"|"max": best}}}`` for the
            searcher metric, the best validation the search recorded (None before one).
    """

    def __init__(self, trial_id: Any, session: Any) -> None:
        if not hasattr(session, "_record"):  # a Determined(), which reads the files
            refuse("Trial(trial_id, session)", "Use client.get_trial(...).")
        self._session = session
        self.id: int = 0
        self.experiment_id: Optional[str] = None
        self.hparams: Optional[Dict[str, Any]] = None
        self.summary_metrics: Optional[Dict[str, Any]] = None
        self.state: Optional[TrialState] = None
        self._experiment: Optional["Experiment"] = None
        self._batches: Optional[int] = None
        self._best: Optional[float] = None
        experiment, number = session._parse_trial_id(trial_id)
        self.id, self.experiment_id = number, experiment

    def _hydrate(self, result: "TrialResult", experiment: "Experiment") -> None:
        self._experiment = experiment
        self.hparams = dict(result.hparams)
        self.state = TRIAL_STATES.get(result.status, TrialState.ERROR)
        self._batches, self._best = result.batches, result.best_metric
        searcher = experiment._searcher
        self.summary_metrics = None
        if result.best_metric is not None:
            best = "min" if searcher.smaller_is_better else "max"
            metric = searcher.metric
            self.summary_metrics = {"validation_metrics": {metric: {best: result.best_metric}}}

    def reload(self) -> None:
        """Reads the trial's state again."""
        experiment = self.get_experiment()
        experiment.reload()
        self._hydrate(experiment._result(self.id), experiment)

    def get_experiment(self) -> "Experiment":
        if self._experiment is None:
            assert self.experiment_id is not None
            self._experiment = self._session.get_experiment(self.experiment_id)
        return self._experiment

    def list_checkpoints(
        self,
        sort_by: Optional[Union[str, CheckpointSortBy]] = None,
        order_by: Optional[OrderBy] = None,
        max_results: Optional[int] = None,
    ) -> List[Checkpoint]:
        """The trial's checkpoints, sorted (by default by the searcher metric, best first;
        ``sort_by`` and ``order_by`` are given both or neither)."""
        experiment = self.get_experiment()
        mine = [c for c in experiment._checkpoints() if c._trial == self.id]
        return listed(
            mine, experiment._searcher, sort_by=sort_by, order_by=order_by, max_results=max_results
        )

    def get_checkpoints(
        self,
        sort_by: Optional[Union[str, CheckpointSortBy]] = None,
        order_by: Optional[OrderBy] = None,
    ) -> List[Checkpoint]:
        deprecated("Trial.get_checkpoints", "Trial.list_checkpoints()")
        return self.list_checkpoints(sort_by, order_by)

    def top_checkpoint(
        self, sort_by: Optional[str] = None, smaller_is_better: Optional[bool] = None
    ) -> Checkpoint:
        """The trial's best checkpoint by ``sort_by`` (default: the searcher metric)."""
        deprecated("Trial.top_checkpoint", "Trial.list_checkpoints(...,max_results=1)")
        order_by = best_first(sort_by, smaller_is_better)
        found = self.list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
        if not found:
            raise ValueError("No checkpoints found for criteria.")
        return found[0]

    def select_checkpoint(  # noqa: PLR0917  Determined's signature
        self,
        latest: bool = False,
        best: bool = False,
        uuid: Optional[str] = None,
        sort_by: Optional[str] = None,
        smaller_is_better: Optional[bool] = None,
    ) -> Checkpoint:
        """The trial's latest or best checkpoint, or the one named ``uuid`` (exactly one)."""
        deprecated("Trial.select_checkpoint", "Trial.list_checkpoints()")
        if sum([int(latest), int(best), int(uuid is not None)]) != 1:
            raise AssertionError("Exactly one of latest, best, or uuid must be set")
        if (sort_by is None) != (smaller_is_better is None):
            raise AssertionError("sort_by and smaller_is_better must be set together")
        if sort_by is not None and not best:
            raise AssertionError(
                "`sort_by` and `smaller_is_better` parameters can only be used with `best`"
            )
        if uuid:
            return self._session.get_checkpoint(uuid)
        field: Optional[Union[str, CheckpointSortBy]] = sort_by
        order_by = None
        if latest:
            field, order_by = CheckpointSortBy.BATCH_NUMBER, OrderBy.DESC
        elif sort_by:
            order_by = OrderBy.ASC if smaller_is_better else OrderBy.DESC
        found = self.list_checkpoints(sort_by=field, order_by=order_by, max_results=1)
        if not found:
            raise ValueError("No checkpoints found for criteria.")
        return found[0]

    def kill(self) -> NoReturn:
        refuse("Trial.kill", "Stop its experiment (Experiment.kill(), or Ctrl+C on its command).")

    def iter_metrics(self, group: str) -> NoReturn:
        refuse("Trial.iter_metrics", METRICS_INSTEAD)

    stream_metrics = iter_metrics

    def stream_training_metrics(self) -> NoReturn:
        refuse("Trial.stream_training_metrics", METRICS_INSTEAD)

    def stream_validation_metrics(self) -> NoReturn:
        refuse("Trial.stream_validation_metrics", METRICS_INSTEAD)

    def iter_logs(self, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(
            "Trial.iter_logs",
            "A trial logs to its command's output; a failed trial's traceback is in "
            "<checkpoint dir>/<experiment id>/trial-<n>/error.log.",
        )

    logs = iter_logs

    def __repr__(self) -> str:
        return f"Trial(id={self.id}, experiment_id={self.experiment_id!r}, state={self.state})"


__all__ = ["Trial"]
