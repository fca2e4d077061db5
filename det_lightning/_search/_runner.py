"""Searches on Optuna: trials drawn, recorded and shared through an Optuna storage.

One worker (one ``det-lightning experiment`` process) loops::

    resume a trial this machine's dead worker left running, if any   (from its latest checkpoint)
    else pick the bracket furthest from its share of max_trials; study.ask() a trial there,
         its hyperparameters drawn through the trial (Optuna's RandomSampler), or for a grid
         the next waiting point (``_grid``); a trial past the budget (two workers asked at
         once) is dropped unrun
    train it; at each validation the SearchReporter records the searcher metric at the rungs it
         reaches (trial user attribute "rungs") and applies Determined's rule (``_asha.decide``)
         against what the other trials recorded there; a trial ranked out stops through
         context.set_stop_requested (a checkpoint, on_trial_shutdown)
    study.tell(): COMPLETE, PRUNED (stopped at a rung), or FAIL (an error; InvalidHP: not counted)

``grid`` and ``random`` are one bracket without rungs: a trial trains its full length, and its
validations are recorded for the summary. Each bracket is one Optuna study; every worker given
the same storage (by default a journal file beside the checkpoints, safe for several processes
on one machine; ``--storage URL`` for a database several machines share) works on the same
search. Rerunning the command continues it.
"""

import hashlib
import json
import logging
import os
import pathlib
import socket
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import optuna

from det_lightning import errors
from det_lightning._search._asha import EXITED_METRIC, Bracket
from det_lightning._search._grid import enqueue_grid, has_waiting_point, owns_point
from det_lightning._search._reporter import (
    INVALID_HP,
    SURPLUS,
    SearchReporter,
    counted,
    trial_number,
)
from det_lightning._search._sample import suggest
from det_lightning._search._settings import SearchSettings
from det_lightning.pytorch import Batch, Epoch

logger = logging.getLogger("det_lightning")

JOURNAL_NAME = "search.journal"
def admitted(study: optuna.Study, trial: optuna.Trial, settings: SearchSettings,
             bracket: Bracket) -> bool:
    """Whether a trial ``study.ask()`` just gave is within the search: its own grid point, or
    fewer than the bracket's max_trials counted trials before it."""
    trials = study.get_trials(deepcopy=False)
    if settings.grid:
        return owns_point(trials, trial)
    earlier = sum(1 for t in trials if t.number < trial.number and counted(t))
    return earlier < bracket.max_trials


def search_key(raw: Dict[str, Any]) -> str:
    """Names this search's studies: the same config continues the same search."""
    relevant = {k: raw.get(k) for k in ("name", "hyperparameters", "searcher", "entrypoint")}
    return hashlib.sha1(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:10]


def open_storage(url: Optional[str], checkpoint_root: pathlib.Path) -> Any:
    """The Optuna storage: ``url`` (a database URL, or a journal file path), else a journal file
    beside the checkpoints."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if url and "://" in url:
        return _open_database(url)
    path = pathlib.Path(url) if url else checkpoint_root / JOURNAL_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def _open_database(url: str, attempts: int = 5) -> Any:
    """Optuna's RDB storage for ``url``, one for all the studies of this worker.

    Opening it creates Optuna's tables in a new database. Workers starting together on an empty
    database all try to: PostgreSQL makes the others wait for the first one's transaction, then
    fails them ("type studydirection already exists"; likewise for the schema version records
    written next). Each failure means another worker's transaction at that step committed, so
    trying again finds what it wrote and gets further. The tables are made through a storage
    without a connection pool, so a failed try leaves no connection open.
    """
    from sqlalchemy import exc, pool

    for attempt in range(attempts):
        try:
            optuna.storages.RDBStorage(url, engine_kwargs={"poolclass": pool.NullPool})
            break
        except (exc.IntegrityError, exc.ProgrammingError, exc.OperationalError):
            if attempt == attempts - 1:
                raise
            logger.info("another worker is creating the search's tables; trying again")
    return optuna.storages.get_storage(url)


def storage_ref(plan: Any) -> str:
    """The plan's storage as other processes are told it: the URL or journal file path."""
    return str(plan.storage or plan.checkpoint_root / JOURNAL_NAME)


def lengths_for(settings: SearchSettings, bracket: Bracket, config: Any) -> Dict[str, Any]:
    """``fit()``'s lengths for a trial of ``bracket``: the full length, validating at each rung
    (and at ``min_validation_period`` when it is in the same unit)."""
    unit = Batch if settings.time_metric == "batches" else Epoch
    points = set(bracket.rung_units)
    (period_unit, period), = config.raw["min_validation_period"].items()
    if period_unit == settings.time_metric and period > 0:
        points.update(range(period, settings.max_time + 1, period))
    (ckpt_unit, ckpt_period), = config.raw["min_checkpoint_period"].items()
    checkpoint = (unit(ckpt_period) if ckpt_unit == settings.time_metric and ckpt_period > 0
                  else None)
    return {
        "max_length": unit(settings.max_time),
        "validation_period": unit(sorted(points)),
        "checkpoint_period": checkpoint,
        "reporting_period": Batch(config.raw["scheduling_unit"]),
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def open_studies(storage: Any, key: str, settings: SearchSettings) -> List[optuna.Study]:
    """One study per bracket (a grid's with its points enqueued)."""
    direction = (optuna.study.StudyDirection.MINIMIZE if settings.smaller_is_better
                 else optuna.study.StudyDirection.MAXIMIZE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = [
        optuna.create_study(study_name=f"{key}-bracket-{i}", storage=storage,
                            direction=direction, load_if_exists=True)
        for i in range(len(settings.brackets))
    ]
    if settings.grid:
        enqueue_grid(studies[0], settings.grid)
    return studies


def stale_trial(studies: Sequence[optuna.Study]) -> Optional[Tuple[int, optuna.Trial]]:
    """A trial a dead worker on this machine left RUNNING, to resume from its checkpoint."""
    host = socket.gethostname()
    for index, study in enumerate(studies):
        for frozen in study.get_trials(deepcopy=False,
                                       states=(optuna.trial.TrialState.RUNNING,)):
            attrs = frozen.user_attrs
            if attrs.get("host") == host and not _alive(int(attrs.get("pid", -1))):
                trial = optuna.trial.Trial(study, frozen._trial_id)
                if _claim(study, trial):
                    return index, trial
    return None


def _claim(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Takes over a dead worker's trial, unless another worker restarted at the same moment
    claims it too: the last claim written wins, and the others look for other work."""
    import time
    import uuid

    token = uuid.uuid4().hex
    trial.set_user_attr("claim", token)
    time.sleep(0.5)  # let a competing claim land in the storage before reading back
    if _current_attrs(study, trial).get("claim") != token:
        return False
    trial.set_user_attr("pid", os.getpid())
    return True


def next_bracket(studies: Sequence[optuna.Study], settings: SearchSettings) -> Optional[int]:
    """The bracket furthest from its share of max_trials (InvalidHP trials do not count: a
    new trial replaces each), or for a grid its study while a point waits (a point whose
    trial raised InvalidHP is done, as in Determined)."""
    if settings.grid:
        return 0 if has_waiting_point(studies[0]) else None
    best: Optional[Tuple[float, int]] = None
    for index, (study, bracket) in enumerate(zip(studies, settings.brackets)):
        started = sum(1 for t in study.get_trials(deepcopy=False) if counted(t))
        if started < bracket.max_trials:
            share = started / bracket.max_trials
            if best is None or share < best[0]:
                best = (share, index)
    return None if best is None else best[1]


def _ask(study: optuna.Study, settings: SearchSettings, bracket: Bracket, space: Dict[str, Any],
         seed: Optional[int]) -> Optional[optuna.Trial]:
    """A new trial of ``study`` with its hyperparameters, or None when another worker filled
    the budget first (the trial asked for is then dropped unrun)."""
    if seed is not None:  # repeatable draws, a different one for each trial
        study.sampler = optuna.samplers.RandomSampler(
            seed=seed + len(study.get_trials(deepcopy=False)))
    else:
        study.sampler = optuna.samplers.RandomSampler()
    trial = study.ask()
    if not admitted(study, trial, settings, bracket):
        trial.set_user_attr(SURPLUS, True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    with warnings.catch_warnings():
        # A grid's last double can be one ulp past maxval, as in Determined (``_config._search``).
        warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
        trial.set_user_attr("hparams", suggest(trial, space))
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())
    return trial


def run_search(plan: Any, storage_url: Optional[str] = None) -> List[Any]:
    """Runs (or continues) the plan's search; returns every trial's result."""
    from det_lightning._experiment import TrialResult

    settings: SearchSettings = plan.search
    config = plan.config
    storage = open_storage(storage_url, plan.checkpoint_root)
    reference = storage_url or storage_ref(plan)
    studies = open_studies(storage, search_key(config.raw), settings)
    seed = config.experiment_seed()
    max_restarts = int(config.raw.get("max_restarts") or 0)
    while True:
        found = stale_trial(studies)
        resume = found is not None
        if found is None:
            index = next_bracket(studies, settings)
            if index is None:
                break
            study = studies[index]
            asked = _ask(study, settings, settings.brackets[index],
                         config.raw["hyperparameters"], seed)
            if asked is None:
                continue
            trial = asked
        else:
            index, trial = found
            study = studies[index]
        hparams = trial.user_attrs["hparams"]
        bracket = settings.brackets[index]
        number = trial_number(trial)
        where = (f"bracket {index}, rungs at {list(bracket.rung_units)} {settings.time_metric}"
                 if bracket.rung_units else settings.searcher)
        logger.info(f"trial {number} ({where}){' resumed' if resume else ''}: {hparams}")
        _run_trial(plan, settings, bracket, study, trial, number, hparams, resume,
                   max_restarts, reference)
    return summarize(studies, plan, settings, TrialResult)


def _run_trial(plan: Any, settings: SearchSettings, bracket: Bracket, study: optuna.Study,
               trial: optuna.Trial, number: int, hparams: Dict[str, Any], resume: bool,
               max_restarts: int, storage_ref: str) -> None:
    if trial.user_attrs.get("stopped"):
        # Its worker died after ASHA stopped it (and after its checkpoint, or while writing it).
        logger.info(f"trial {number}: was stopped at rung {trial.user_attrs.get('rung')}")
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        return
    from det_lightning._experiment import run_command_trial, run_legacy_trial, write_trial_hparams

    write_trial_hparams(plan, number, hparams)
    reporters: List[SearchReporter] = []

    def reporter(context: Any) -> Dict[str, Any]:
        reporters.append(SearchReporter(study, trial, settings, bracket, context))
        return {"_det_lightning_search": reporters[-1]}

    def attempt(again: bool) -> Any:
        if plan.trial_class is not None:
            lengths = lengths_for(settings, bracket, plan.config) if bracket.rung_units else None
            return run_legacy_trial(
                plan, number, hparams, lengths=lengths,
                extra_callbacks=reporter, latest_checkpoint="latest" if again else None,
            )
        result = run_command_trial(plan, number, hparams, extra_env=_child_environment(
            plan, settings, bracket, study, trial, number, hparams, again, storage_ref))
        invalid = _current_attrs(study, trial).get(INVALID_HP)
        if invalid:  # the script raised InvalidHP (_child.report_invalid_hp)
            raise errors.InvalidHP(str(invalid))
        if result.status != "COMPLETED":
            raise RuntimeError(f"trial {number}: its command failed")
        return result

    attempts = 0
    while True:
        try:
            result = attempt(resume or attempts > 0)
            break
        except errors.InvalidHP as invalid:
            logger.info(f"trial {number}: InvalidHP ({invalid.msg}); another trial replaces it")
            trial.set_user_attr(INVALID_HP, invalid.msg or True)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        except errors.InvalidExperimentException:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise  # the trial cannot be ranked (e.g. no searcher metric): Determined stops too
        except errors.TrialPreempted:
            raise  # the trial stays RUNNING: rerunning the search resumes it
        except Exception:
            attempts += 1
            if attempts <= max_restarts:
                logger.exception(f"trial {number} failed; restart {attempts} of {max_restarts} "
                                 "from its latest checkpoint")
                continue
            logger.exception(f"trial {number} failed")
            if bracket.rung_units:  # ASHA: it counts as the worst at its rung
                attrs = _current_attrs(study, trial)
                rungs = dict(attrs.get("rungs", {}))
                rungs[str(attrs.get("rung", 0))] = EXITED_METRIC
                trial.set_user_attr("rungs", rungs)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
    trial.set_user_attr("checkpoint", str(result.checkpoint) if result.checkpoint else None)
    attrs = _current_attrs(study, trial)
    values = _current_values(study, trial)
    trial.set_user_attr("batches", result.batches if result.batches is not None
                        else (max(values) if values else None))
    if attrs.get("stopped"):
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    elif values:
        study.tell(trial, values[max(values)])
    else:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)


def _frozen(study: optuna.Study, trial: optuna.Trial) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)


def _current_attrs(study: optuna.Study, trial: optuna.Trial) -> Dict[str, Any]:
    """The trial's user attributes as the storage has them now (a child process may have
    written them)."""
    return dict(_frozen(study, trial).user_attrs)


def _current_values(study: optuna.Study, trial: optuna.Trial) -> Dict[int, float]:
    return dict(_frozen(study, trial).intermediate_values)


def _child_environment(plan: Any, settings: SearchSettings, bracket: Bracket, study: optuna.Study,
                       trial: optuna.Trial, number: int, hparams: Dict[str, Any], again: bool,
                       storage_ref: str) -> Dict[str, str]:
    """What a command trial is told: its hyperparameters and checkpoint (as Determined's
    cluster info) and where to report (the search)."""
    from det_lightning._info import TRIAL_INFO_ENV, ClusterInfo, TrialInfo
    from det_lightning._search._child import search_environment
    from det_lightning.pytorch import _checkpoint as ckpt
    from det_lightning.pytorch._trainer import SEARCH_ENV

    latest = ckpt.latest_checkpoint(plan.checkpoint_root / f"trial-{number}") if again else None
    info = ClusterInfo(TrialInfo(number, 0, hparams, plan.config.raw),
                       latest_checkpoint=str(latest) if latest else None)
    return {
        TRIAL_INFO_ENV: info.to_environment(),
        SEARCH_ENV: search_environment(storage_ref, study.study_name, trial._trial_id, settings,
                                       bracket),
    }


def summarize(studies: Sequence[optuna.Study], plan: Any, settings: SearchSettings,
              result_type: Any) -> List[Any]:
    """Every trial of the search as the experiment's summary table reads it."""
    results = []
    states = optuna.trial.TrialState
    for study in studies:
        for frozen in study.get_trials(deepcopy=False):
            attrs = frozen.user_attrs
            if not counted(frozen) or frozen.state == states.WAITING:
                continue
            values = list(frozen.intermediate_values.values())
            best = None
            if values:
                best = min(values) if settings.smaller_is_better else max(values)
            status = {states.COMPLETE: "COMPLETED", states.PRUNED: "COMPLETED",
                      states.FAIL: "ERROR"}.get(frozen.state, frozen.state.name)
            checkpoint = attrs.get("checkpoint")
            results.append(result_type(
                trial_number(frozen), attrs.get("hparams", {}), status, best,
                pathlib.Path(checkpoint) if checkpoint else None, batches=attrs.get("batches"),
            ))
    return sorted(results, key=lambda r: r.number)
