"""Inside a trial of a search: report its validations to the search's study.

``det-lightning experiment`` starts a command entrypoint (``python3 train.py``) as a child
process, ``det-lightning run``, with ``$DET_LIGHTNING_SEARCH`` naming the storage, the study, the
trial and its bracket; ``run`` runs the script inside ``reporting_to_search()``, so each
``pytorch.Trainer.fit`` adds the ``SearchReporter``, and a Core API loop's ``core.init()``
reports to the ``CoreReporter``. A model_def trial's process
(``_jobs.legacy_job``) is given the same variable and reports the same way.
A script that raises ``det.InvalidHP`` records it on its trial (``report_invalid_hp``) and
exits 0, as Determined's harness reports the early exit to the master: the search then drops
the trial and starts another, as for a model_def trial.
"""

import contextlib
import functools
import json
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import optuna

from det_lightning import errors
from det_lightning._env import SEARCH_ENV
from det_lightning._info import get_cluster_info
from det_lightning._runner._asha import Bracket
from det_lightning._runner._lease import BRACKET, raise_if_taken_over, search_name
from det_lightning._runner._optuna import live_trial, storage_of
from det_lightning._runner._search_settings import SearchSettings, length_mismatch
from det_lightning._runner.config import Lengths
from det_lightning._runner.search._reporter import INVALID_HP, RungRecorder, SearchReporter
from det_lightning._runner.search._storage import open_storage
from det_lightning.core._search_hooks import core_search
from det_lightning.pytorch import Epoch, PyTorchCallback, TrainUnit
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._store import publish_check
from det_lightning.pytorch._trainer import fit_callbacks

trainer_logger = logging.getLogger("det_lightning.pytorch")  # where fit() logged this warning


def search_environment(
    storage: str, study_name: str, trial_id: int, settings: SearchSettings, *, bracket: Bracket
) -> str:
    """The value of ``$DET_LIGHTNING_SEARCH`` for one trial."""
    return json.dumps(
        {
            "storage": storage,
            "study": study_name,
            "trial_id": trial_id,
            "metric": settings.metric,
            "smaller_is_better": settings.smaller_is_better,
            "time_metric": settings.time_metric,
            "max_time": settings.max_time,
            "max_trials": settings.max_trials,
            "divisor": settings.divisor,
            "bracket": {
                "num_rungs": bracket.num_rungs,
                "max_trials": bracket.max_trials,
                "max_concurrent_trials": bracket.max_concurrent_trials,
                "rung_units": list(bracket.rung_units),
            },
        }
    )


def _search_trial() -> optuna.Trial:
    """The search's trial this process trains, from ``$DET_LIGHTNING_SEARCH``: one for the
    process, so its reporter and its publish check share one storage (on a database, one
    connection pool: Optuna's storages are safe to use from several threads, and the publish
    check runs in the background writer's)."""
    return _trial_of(os.environ[SEARCH_ENV])


@functools.lru_cache(maxsize=1)
def _trial_of(search_env: str) -> optuna.Trial:
    spec: Dict[str, Any] = json.loads(search_env)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # (the worker resolved the storage to a URL or a journal path: storage_ref)
    storage = open_storage(spec["storage"], made=True)
    study = optuna.load_study(study_name=spec["study"], storage=storage)
    return live_trial(study, int(spec["trial_id"]))


def report_invalid_hp(message: str) -> None:
    """Records on the search's trial that its script raised ``InvalidHP(message)``."""
    _search_trial().set_user_attr(INVALID_HP, message or "InvalidHP")


def _settings(spec: Dict[str, Any]) -> Tuple[SearchSettings, Bracket]:
    bracket = Bracket(
        spec["bracket"]["num_rungs"],
        spec["bracket"]["max_trials"],
        spec["bracket"]["max_concurrent_trials"],
        tuple(spec["bracket"]["rung_units"]),
    )
    settings = SearchSettings(
        spec["metric"],
        spec["smaller_is_better"],
        spec["time_metric"],
        spec["max_time"],
        spec["max_trials"],
        spec["divisor"],
        [bracket],
    )
    return settings, bracket


def in_batches(length: TrainUnit, epoch_len: int) -> int:
    """``length`` in batches, an epoch being ``epoch_len`` of them.

    >>> from det_lightning.pytorch import Batch, Epoch
    >>> in_batches(Epoch(1), 64) == in_batches(Batch(64), 64)
    True
    """
    assert isinstance(length.value, int)
    return length.value * epoch_len if isinstance(length, Epoch) else length.value


class SearcherLengthCheck(PyTorchCallback):
    """A search's trial whose script trains for its own length: warned once the epoch length
    is known (``Epoch(1)`` of 64 batches is the searcher's ``max_time: 64`` batches), as
    Determined does when ``searcher.time_metric`` is set, and always under ``adaptive_asha``
    (its rungs)."""

    def __init__(self, spec: Dict[str, Any], max_length: TrainUnit, context: Any) -> None:
        self.spec, self.max_length, self.context = spec, max_length, context

    def on_training_start(self) -> None:
        info = get_cluster_info()
        if info is None:  # not a search's trial (a model_def trial's fit() gets the searcher's
            return  # own lengths from the runner, so it passes the check below)
        lengths = Lengths.from_config(info.trial.config)
        try:
            expected = lengths.searcher_length(info.trial.hparams)
        except errors.InvalidConfigException:  # records without global_batch_size: none
            return
        epoch_len = self.context.engine.require_epoch_len()
        if expected is None or in_batches(expected, epoch_len) == in_batches(
            self.max_length, epoch_len
        ):
            return
        rungs = self.spec["bracket"]["rung_units"]
        if rungs or lengths.searcher_time is not None:
            trainer_logger.warning(
                length_mismatch(self.max_length, expected, rungs, self.spec["time_metric"])
            )


def reporter_callbacks(
    context: PyTorchTrialContext, max_length: TrainUnit
) -> Dict[str, PyTorchCallback]:
    """The search's reporter for a trial's ``fit()`` (on the chief: it reports); ``max_length``:
    what the trial's ``fit()`` trains for."""
    spec: Dict[str, Any] = json.loads(os.environ[SEARCH_ENV])
    if context.distributed.rank != 0:
        return {}
    settings, bracket = _settings(spec)
    live = _search_trial()
    return {
        "_det_lightning_search": SearchReporter(
            live.study, live, settings, bracket, context=context, max_length=max_length
        ),
        "_det_lightning_search_length": SearcherLengthCheck(spec, max_length, context),
    }


class CoreReporter:
    """A Core API loop's link to the search (``core._search_hooks.SearchHook``), on the chief:
    each validation that holds the searcher metric is recorded as a ``pytorch.Trainer``
    trial's is, its progress being the validation's ``time_metric`` value (Determined 0.38's
    rule: the Core API tutorial reports ``{"test_loss": ..., "epochs": ...}``), else
    ``steps_completed``; ``should_preempt()`` turns True once ASHA ranks the trial out."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        settings, bracket = _settings(spec)
        live = _search_trial()
        self.recorder = RungRecorder(live.study, live, settings, bracket)
        self.settings = settings
        self.length: Optional[int] = settings.max_time
        self._said: set = set()

    def validation(self, steps_completed: int, metrics: Dict[str, Any]) -> None:
        metric, unit = self.settings.metric, self.settings.time_metric
        if metric not in metrics:
            self._once(
                f"a validation without searcher.metric {metric!r} (it reported "
                f"{sorted(metrics)}): the search ranks the trial by the validations that have it"
            )
            self.recorder.note_validation(steps_completed, metrics, lease_checked=False)
            return
        at = metrics.get(unit) if unit else None
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            if unit not in (None, "batches"):
                self._once(
                    f"the validation metrics hold no {unit!r} (searcher.time_metric): the "
                    f"search takes steps_completed ({steps_completed}) as the trial's progress; "
                    f"report {{{metric!r}: ..., {unit!r}: ...}} as Determined's Core API "
                    "tutorial does"
                )
            at = steps_completed
        value = float(metrics[metric])
        decision = self.recorder.record(value, int(at))
        self.recorder.note_validation(steps_completed, metrics)
        if self.recorder.ranked_out(decision) and not self.recorder.stopped:
            self.recorder.stop(value)

    def stop_requested(self) -> bool:
        return self.recorder.stopped

    def best_validation(self) -> Optional[float]:
        return experiment_best(self.recorder.study, self.settings.smaller_is_better)

    def _once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            trainer_logger.warning(message)


def experiment_best(study: optuna.Study, smaller_is_better: bool) -> Optional[float]:
    """The best searcher-metric value any trial of ``study``'s experiment reported so far, in
    every bracket's study (what Determined's master answers
    ``get_experiment_best_validation()`` with); None before any."""
    storage = storage_of(study)
    prefix = search_name(study) + BRACKET
    values: List[float] = []
    for name in optuna.get_all_study_names(storage):
        if name.startswith(prefix):
            study_id = storage.get_study_id_from_name(name)
            for trial in storage.get_all_trials(study_id, deepcopy=False):
                values += trial.intermediate_values.values()
    if not values:
        return None
    return min(values) if smaller_is_better else max(values)


def any_rank_best() -> Optional[float]:
    """``get_experiment_best_validation()`` on a rank other than the chief: the same answer,
    read through this process's storage of the search (opened at the first call)."""
    settings, _ = _settings(json.loads(os.environ[SEARCH_ENV]))
    return experiment_best(_search_trial().study, settings.smaller_is_better)


def core_reporter() -> CoreReporter:
    """The chief's ``CoreReporter`` for a Core API loop in this search's trial."""
    return CoreReporter(json.loads(os.environ[SEARCH_ENV]))


def _still_leased() -> None:
    """The search's publish check for this process (``_store.publish_check``): raises
    ``LeaseLost`` once another worker took the trial over. It asks the storage the reporter
    uses (``_search_trial``), opened when first needed (a rank other than the chief, which has
    no reporter, opens it only for a checkpoint to publish)."""
    raise_if_taken_over(_search_trial())


@contextlib.contextmanager
def reporting_to_search() -> Iterator[None]:
    """Inside the block, a ``fit()`` reports to the search named by ``$DET_LIGHTNING_SEARCH``
    (nothing changes without it), and a checkpoint is published (its marker written, in a
    bucket) or deleted only while no other worker has taken the trial over: the commands that
    start a search's trial run it inside."""
    if not os.environ.get(SEARCH_ENV):
        yield
        return
    with fit_callbacks(reporter_callbacks), core_search(core_reporter, any_rank_best):
        with publish_check(_still_leased):
            yield
