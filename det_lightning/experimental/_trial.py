"""``Trial``: one trial of an experiment, from its search storage; its checkpoints."""

import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterator,
    List,
    NoReturn,
    Optional,
    Tuple,
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
    ExperimentState,
    OrderBy,
    TrialMetrics,
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
        summary_metrics: Determined's summary of the validations the search kept
            (``{"validation_metrics": {name: {"count", "last", "min", "max", "sum"}}}``);
            None before the first.
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
        self._validations: Tuple[Tuple[int, float, Dict[str, float]], ...] = ()
        experiment, number = session._parse_trial_id(trial_id)
        self.id, self.experiment_id = number, experiment

    def _hydrate(self, result: "TrialResult", experiment: "Experiment") -> None:
        self._experiment = experiment
        self.hparams = dict(result.hparams)
        self.state = TRIAL_STATES.get(result.status, TrialState.ERROR)
        if experiment.state is ExperimentState.CANCELED and self.state in (
            TrialState.RUNNING,
            TrialState.PAUSED,
        ):
            self.state = TrialState.CANCELED  # as Determined's trials of a canceled one
        self._batches, self._best = result.batches, result.best_metric
        self._validations = result.validations
        self.summary_metrics = _summary(result.validations)
        if self.summary_metrics is None and result.best_metric is not None:
            searcher = experiment._searcher  # a search before histories: its best only
            best = "min" if searcher.smaller_is_better else "max"
            validation = {searcher.metric: {best: result.best_metric}}
            self.summary_metrics = {"validation_metrics": validation}

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

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """The trial's validations, oldest first (``group="validation"``), as the search
        kept them: every numerical metric, by batches trained.

        Raises:
            NotImplementedError: another group (training metrics are in the trial's
                TensorBoard files).
        """
        if group != "validation":
            refuse(f"Trial.iter_metrics({group!r})", METRICS_INSTEAD)
        for batches, when, metrics in self._validations:
            yield TrialMetrics(
                trial_id=self.id,
                trial_run_id=0,
                steps_completed=batches,
                end_time=datetime.datetime.fromtimestamp(when, datetime.timezone.utc),
                metrics=dict(metrics),
                group="validation",
            )

    def stream_metrics(self, group: str) -> Iterator[TrialMetrics]:
        deprecated("Trial.stream_metrics", "Trial.iter_metrics()")
        return self.iter_metrics(group)

    def stream_training_metrics(self) -> NoReturn:
        refuse("Trial.stream_training_metrics", METRICS_INSTEAD)

    def stream_validation_metrics(self) -> Iterator[TrialMetrics]:
        deprecated("Trial.stream_validation_metrics", "Trial.iter_metrics('validation')")
        return self.iter_metrics("validation")

    def iter_logs(self, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(
            "Trial.iter_logs",
            "A trial logs to its command's output; a failed trial's traceback is in "
            "<checkpoint dir>/<experiment id>/trial-<n>/error.log.",
        )

    logs = iter_logs

    def __repr__(self) -> str:
        return f"Trial(id={self.id}, experiment_id={self.experiment_id!r}, state={self.state})"


def _summary(
    validations: Tuple[Tuple[int, float, Dict[str, float]], ...],
) -> Optional[Dict[str, Any]]:
    """Determined's ``summary_metrics`` of a validation history: per metric its count, last,
    min, max and sum.

    >>> _summary(((4, 0.0, {"loss": 2.0}), (8, 0.0, {"loss": 1.0})))["validation_metrics"]
    {'loss': {'count': 2, 'last': 1.0, 'max': 2.0, 'min': 1.0, 'sum': 3.0, 'type': 'number'}}
    """
    if not validations:
        return None
    summary: Dict[str, Dict[str, Any]] = {}
    for _, _, metrics in validations:
        for name, value in metrics.items():
            entry = summary.setdefault(
                name, {"count": 0, "last": value, "max": value, "min": value, "sum": 0.0}
            )
            entry["count"] += 1
            entry["last"], entry["sum"] = value, entry["sum"] + value
            entry["max"], entry["min"] = max(entry["max"], value), min(entry["min"], value)
            entry["type"] = "number"
    return {"validation_metrics": summary}


__all__ = ["Trial"]
