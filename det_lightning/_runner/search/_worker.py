"""Searches on Optuna: trials drawn, recorded and shared through an Optuna storage.

One worker (one ``det-lightning experiment`` process) loops::

    take over a trial whose lease expired, if any (its worker died, on any machine; ``_lease``,
         ``_waiting``): its continuation resumes from the trial's latest checkpoint
    else pick the bracket furthest from its share of max_trials; study.ask() a trial there,
         its hyperparameters drawn through the trial (Optuna's RandomSampler), or for a grid
         the next waiting point (``_grid``); a trial past the budget (two workers asked at
         once) is dropped unrun (``_asking``)
    train it, in a process of its own forked from the worker's warm template (``_template``);
         at each validation the SearchReporter records the searcher metric at the rungs it
         reaches (trial user attribute "rungs") and applies Determined's rule (``_asha.decide``)
         against what the other trials recorded there; a trial ranked out stops through
         context.set_stop_requested (a checkpoint, on_trial_shutdown)
    study.tell(): COMPLETE, PRUNED (stopped at a rung), or FAIL (an error; InvalidHP: not counted)
    no trial left to start, but some still RUNNING elsewhere: wait (logging their pid and host),
         renewing nothing, until they finish or their leases expire (then take them over;
         ``_waiting``); none left: exit; the summary reads every trial (``_results``)

While a worker trains a trial it renews the trial's lease every few seconds; a worker that
finds its lease lost (another worker took the trial over) stops training it at once.

``grid``, ``random`` and ``single`` (one trial) are one bracket without rungs: a trial trains its
full length, and its validations are recorded for the summary. Every attempt of a trial resumes
from its own latest checkpoint, if it has one (a rerun, a takeover, a restart after an error). Each bracket is one Optuna study; every worker given
the same storage (by default a journal file beside the checkpoints, safe for several processes
on one machine; ``--storage URL`` for a database several machines share) works on the same
search. Rerunning the command continues it.
"""

import dataclasses
import functools
import json
import logging
import os
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence

import optuna

from det_lightning import errors
from det_lightning._env import (
    LATEST_CHECKPOINT_ENV,
    RESUME_ADVICE_ENV,
    RUN_IDENTITY_ENV,
    SEARCH_ENV,
    TRIAL_INFO_ENV,
)
from det_lightning._runner._asha import EXITED_METRIC, Bracket
from det_lightning._runner._failure import log_failure
from det_lightning._runner._lease import (
    BRACKET,
    CONTINUES,
    LeaseKeeper,
    LeaseLost,
    LeaseSettings,
    superseded_now,
    taken_over,
)
from det_lightning._runner._optuna import trial_id
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._template import TrialStarter
from det_lightning._runner._trial_record import (
    BATCHES,
    CHECKPOINT,
    HPARAMS,
    RUNG,
    RUNGS,
    STOPPED,
    TRIAL_SEED,
    UNRANKED,
)
from det_lightning._runner.config import ExperimentConfig
from det_lightning._runner.plan import Plan
from det_lightning._runner.search._asking import _admit, _ask, next_bracket
from det_lightning._runner.search._child import search_environment
from det_lightning._runner.search._experiment_seed import (
    drawn_seed_note,
    experiment_seed,
    recorded_experiment_seed,
)
from det_lightning._runner.search._interrupt import (
    SearchInterrupt,
    StopWatcher,
    search_advice,
)
from det_lightning._runner.search._jobs import run_legacy_process, run_trial
from det_lightning._runner.search._reporter import INVALID_HP, trial_number
from det_lightning._runner.search._results import summarize
from det_lightning._runner.search._storage import (
    open_storage,
    open_studies,
    read_studies,
    storage_ref,
)
from det_lightning._runner.search._waiting import (
    expired_trial,
    note_waiting,
    others_running,
    until_an_expiry,
    wait_a_while,
)
from det_lightning._runner.trial import (
    Launch,
    TrialResult,
    newest_checkpoint,
    run_command_trial,
    write_trial_hparams,
)
from det_lightning.pytorch import Batch, Epoch
from det_lightning.pytorch._units import AnyOf

logger = logging.getLogger("det_lightning")


def lengths_for(
    settings: SearchSettings, bracket: Bracket, config: ExperimentConfig, hparams: Dict[str, Any]
) -> Dict[str, Any]:
    """``fit()``'s lengths for a trial of ``bracket``: the full length, validating at each rung
    and at ``min_validation_period``, checkpointing at ``min_checkpoint_period``; both periods
    as written, in their own unit (records converted to batches), as Determined passes them to
    ``fit()``.

    Raises:
        errors.InvalidConfigException: a period in records has no ``global_batch_size``.
    """
    unit = Batch if settings.time_metric == "batches" else Epoch
    periods = config.lengths.fit_periods(hparams)
    return {
        **periods,
        "max_length": unit(settings.max_time),
        "validation_period": AnyOf(unit(list(bracket.rung_units)), periods["validation_period"]),
    }


@dataclasses.dataclass(frozen=True)
class SearchOutcome:
    """What one worker's run of a search ends with: every trial's result, and the signal that
    interrupted the run, or ``cancel``/``kill``/``pause`` (None: it ran until no trial was
    left to start) with the mark that said so (``mark``: as this worker read it, whatever
    became of the file since: an ``activate()`` may have taken it back already)."""

    trials: List[TrialResult]
    interrupted_by: Optional[str] = None
    mark: Optional[Dict[str, Any]] = None


@dataclasses.dataclass(frozen=True)
class WorkerSetup:
    """What every trial one worker runs shares: the plan, the search, where the trials report
    (``storage_ref``: the storage as a trial's process is told it) and how a trial's process
    is started (``launch``)."""

    plan: Plan
    settings: SearchSettings
    storage_ref: str
    launch: Launch

    @property
    def max_restarts(self) -> int:
        """How often an error is retried from the trial's latest checkpoint."""
        return self.plan.config.max_restarts


@dataclasses.dataclass(frozen=True)
class TrialRun:
    """One run of one trial of the search on this worker: its study and bracket, the Optuna
    trial with its number and hyperparameters, whether it continues a trial taken over
    (``resume``: from its latest checkpoint), and ``lost``, set by the lease keeper once
    another worker takes it over."""

    worker: WorkerSetup
    study: optuna.Study
    bracket: Bracket
    trial: optuna.Trial
    number: int
    hparams: Dict[str, Any]
    trial_seed: int
    resume: bool
    lost: threading.Event


def search_summary(plan: Plan, storage_url: Optional[str] = None) -> List[TrialResult]:
    """Every trial of the plan's search as it stands, training nothing and writing nothing
    (``read_studies``: a search not begun has none)."""
    studies = read_studies(storage_url, plan.checkpoint_root, plan.experiment_id)
    return summarize(studies, plan, plan.search)


def search_seed(plan: Plan, storage_url: Optional[str] = None) -> Optional[int]:
    """The experiment seed the plan's search runs with (``_experiment_seed``): the config's,
    else the one drawn when it began (None: none recorded yet, or begun before seeds were).
    Reads only: it neither waits for a seed nor records one."""
    configured = configured_seed(plan)
    if configured is not None:
        return configured
    studies = read_studies(storage_url, plan.checkpoint_root, plan.experiment_id)
    first = [s for s in studies if s.study_name.endswith(f"{BRACKET}0")]
    return recorded_experiment_seed(first[0]) if first else None


def configured_seed(plan: Plan) -> Optional[int]:
    """``reproducibility.experiment_seed``, if the config sets it."""
    return plan.config.reproducibility_config.experiment_seed


def run_search(plan: Plan, storage_url: Optional[str] = None) -> SearchOutcome:
    """Runs (or continues) the plan's search until no trial is left to start, or a signal or
    the experiment's cancel or pause stops it (``_interrupt``)."""
    settings, configured = plan.search, configured_seed(plan)
    storage = open_storage(storage_url, plan.checkpoint_root)
    studies = open_studies(storage, plan.experiment_id, settings, seed=configured)
    seed = experiment_seed(studies[0], configured)
    if configured is None and seed is not None:
        logger.info(drawn_seed_note(seed))
    os.environ[RESUME_ADVICE_ENV] = search_advice(sys.argv[1:])  # a trial's, after a signal
    with SearchInterrupt() as interrupt, StopWatcher(plan.checkpoint_root, interrupt):
        reference = storage_ref(storage_url, plan.checkpoint_root)
        stopped = _work(plan, settings, studies, reference, seed=seed, interrupt=interrupt)
    interrupted = frozenset() if stopped is None else frozenset({stopped})
    results = summarize(studies, plan, settings, interrupted)
    return SearchOutcome(results, interrupt.received, interrupt.mark)


def _work(
    plan: Plan,
    settings: SearchSettings,
    studies: Sequence[optuna.Study],
    reference: str,
    *,
    seed: Optional[int],
    interrupt: SearchInterrupt,
) -> Optional[int]:
    """Trains one trial after another until none is left to start or to take over, or a
    signal arrived; returns the number of the trial a signal stopped, if one did (``seed``: the
    experiment seed, ``_experiment_seed``)."""
    leases = LeaseSettings(plan.heartbeat_timeout)
    with TrialStarter() as starter:  # each trial in its own process, forked from a warm one
        launch = functools.partial(run_trial, starter, interrupt)
        worker = WorkerSetup(plan, settings, reference, launch)
        return _loop(worker, studies, interrupt, leases, seed=seed)


def _loop(
    worker: WorkerSetup,
    studies: Sequence[optuna.Study],
    interrupt: SearchInterrupt,
    leases: LeaseSettings,
    *,
    seed: Optional[int],
) -> Optional[int]:
    settings, config = worker.settings, worker.plan.config
    waited_for: List[str] = []
    while interrupt.received is None:
        found = expired_trial(studies, leases)
        if found is None:
            index = next_bracket(studies, settings)
            if index is None:
                if not others_running(studies):
                    break
                waited_for = note_waiting(worker.plan.experiment_id, studies, waited_for)
                wait_a_while(until_an_expiry(studies, leases), interrupt, studies)
                continue
            asked = _ask(studies[index], settings, index, config.hyperparameters, seed=seed)
            if asked is None:
                continue
            found = (index, asked)
        elif (
            _admit(
                studies[found[0]],
                settings,
                found[0],
                found[1],
                space=config.hyperparameters,
                seed=seed,
            )
            is None
        ):
            continue  # taken over before it had drawn its point: past the budget after all
        index, trial = found
        study, bracket = studies[index], settings.brackets[index]
        resume = CONTINUES in trial.user_attrs
        hparams = trial.user_attrs[HPARAMS]
        trial_seed = _trial_seed(trial, seed)
        number = trial_number(trial)
        where = (
            f"bracket {index}, rungs at {list(bracket.rung_units)} {settings.time_metric}"
            if bracket.rung_units
            else settings.searcher
        )
        taken = (
            " resumed from its latest checkpoint (its earlier run was interrupted, or its "
            "worker died)"
            if resume
            else ""
        )
        logger.info(f"trial {number} ({where}){taken}: {hparams}, seed {trial_seed}")
        with LeaseKeeper(study, trial_id(trial), leases) as keeper:
            try:
                _run_trial(
                    TrialRun(
                        worker,
                        study,
                        bracket,
                        trial,
                        number,
                        hparams,
                        trial_seed,
                        resume,
                        keeper.lost,
                    )
                )
            except errors.TrialPreempted:  # it stays RUNNING: rerunning the search resumes it
                keeper.release()  # any worker may take it over at once
                interrupt.note("a signal")
                return number
            except LeaseLost:
                logger.warning(
                    f"trial {number}: another worker took it over (this worker's "
                    "lease had expired); stopped training it here"
                )
    return None


def _trial_seed(trial: optuna.Trial, experiment_seed: Optional[int]) -> int:
    """The seed the trial drew (``TRIAL_SEED``). A trial of a search written before trials drew
    seeds has none: the experiment seed, which seeded it then (0 where there is none: it was
    unseeded, and a cluster trial always has a seed)."""
    drawn = trial.user_attrs.get(TRIAL_SEED)
    return int(drawn) if drawn is not None else (experiment_seed or 0)


def _run_trial(run: TrialRun) -> None:
    """Trains the trial in a process of its own (``launch``; retrying errors ``max_restarts``
    times) and tells the study how it ended.

    Raises:
        LeaseLost: another worker took the trial over, whatever this worker was doing when it
            noticed: training, or recording an end the storage then refused (the trial was
            finished by the takeover; its continuation, the new owner's, is left as it is).
    """
    try:
        _train_and_tell(run)
    except LeaseLost:
        raise
    except Exception as e:
        if _taken_over(run):
            raise taken_over(run.number) from e
        raise


def _taken_over(run: TrialRun) -> bool:
    """Whether another worker took the trial over: the lease keeper noticed, or the storage
    says so (a takeover its keeper has not renewed since, e.g. as the trial ended)."""
    return run.lost.is_set() or superseded_now(run.study, trial_id(run.trial))


def invalid_hp_outcome(searcher: str) -> str:
    """What a search does with a trial that raised InvalidHP, as Determined's searchers do.

    >>> invalid_hp_outcome("grid")
    'the trial is dropped: a grid does not replace its point'
    >>> invalid_hp_outcome("random")
    'another trial replaces it'
    """
    if searcher == "grid":
        return "the trial is dropped: a grid does not replace its point"
    if searcher == "single":
        return "the trial exited early and the experiment ends"
    return "another trial replaces it"


def _train_and_tell(run: TrialRun) -> None:
    plan, settings, launch = run.worker.plan, run.worker.settings, run.worker.launch
    study, bracket, trial, number = run.study, run.bracket, run.trial, run.number
    hparams, lost, max_restarts = run.hparams, run.lost, run.worker.max_restarts
    if trial.user_attrs.get(STOPPED):
        # Its worker died after ASHA stopped it (and after its checkpoint, or while writing it).
        logger.info(f"trial {number}: was stopped at rung {trial.user_attrs.get(RUNG)}")
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        return
    write_trial_hparams(plan, number, hparams)
    lengths = lengths_for(settings, bracket, plan.config, hparams) if bracket.rung_units else None

    def attempt() -> TrialResult:  # each resumes the trial's latest checkpoint, if any
        env = _child_environment(run)
        if plan.trial_class is not None:  # its process adds the search's reporter ($SEARCH_ENV)
            return run_legacy_process(
                launch,
                plan,
                number,
                hparams,
                lengths=lengths,
                latest="latest",
                env=env,
                lost=lost,
            )
        result = run_command_trial(plan, number, hparams, extra_env=env, lost=lost, launch=launch)
        invalid = _current_attrs(study, trial).get(INVALID_HP)
        if invalid:  # the script raised InvalidHP (_child.report_invalid_hp)
            raise errors.InvalidHP(str(invalid))
        if result.status != "COMPLETED":
            raise CommandFailed(number, result.error)
        return result

    attempts = 0
    while True:
        try:
            result = attempt()
            break
        except errors.InvalidHP as invalid:
            outcome = invalid_hp_outcome(settings.searcher)
            logger.info(f"trial {number}: InvalidHP ({invalid.msg}); {outcome}")
            trial.set_user_attr(INVALID_HP, invalid.msg or True)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        except (errors.InvalidExperimentException, errors.InvalidConfigException):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise  # the trial cannot be ranked (e.g. no searcher metric) or loaded: every
            # trial would fail alike; Determined stops too
        except (errors.TrialPreempted, LeaseLost):
            raise  # the trial stays RUNNING: rerunning the search resumes it
        except Exception as e:
            if _taken_over(run):
                raise  # not the trial's error: another worker took it over
            attempts += 1
            if attempts <= max_restarts:
                then = f"restart {attempts} of {max_restarts} from its latest checkpoint"
                log_failure(plan.checkpoint_root, number, e, then)
                continue
            gone = "no restarts left" if settings.searcher == "single" else "the search goes on"
            log_failure(plan.checkpoint_root, number, e, f"{gone} without it")
            if bracket.rung_units:  # ASHA: it counts as the worst at its rung
                attrs = _current_attrs(study, trial)
                rungs = dict(attrs.get(RUNGS, {}))
                rungs[str(attrs.get(RUNG, 0))] = EXITED_METRIC
                trial.set_user_attr(RUNGS, rungs)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
    trial.set_user_attr(CHECKPOINT, str(result.checkpoint) if result.checkpoint else None)
    attrs = _current_attrs(study, trial)
    values = _current_values(study, trial)
    trial.set_user_attr(
        BATCHES,
        result.batches
        if result.batches is not None
        else (max(values) if values and settings.time_metric == "batches" else None),
    )
    if attrs.get(STOPPED):
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    elif values:
        study.tell(trial, values[max(values)])
    else:
        # One trial (single) needs no ranking: a note. In a search it drops out of it.
        log = logger.info if settings.searcher == "single" else logger.warning
        log(unranked_note(number, settings.metric, settings.searcher))
        trial.set_user_attr(UNRANKED, True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)  # Optuna completes with a value


def unranked_note(number: int, metric: str, searcher: str) -> str:
    """What the log says of a trial that ended well without a validation of the searcher
    metric: Determined completes it too, unranked.

    >>> unranked_note(1, "x", "single")
    "trial 1: completed without a validation of searcher.metric 'x': no best metric to show."
    """
    said = f"trial {number}: completed without a validation of searcher.metric {metric!r}"
    if searcher == "single":
        return f"{said}: no best metric to show."
    why = (
        "the search cannot rank it (adaptive_asha stops it at no rung)"
        if searcher == "adaptive_asha"
        else "it is not among the trials ranked for the best"
    )
    return (
        f"{said}, so {why}. Searches read the metric from pytorch.Trainer's validations "
        "(evaluate_batch or evaluate_full_dataset) or from "
        "core_context.train.report_validation_metrics."
    )


class CommandFailed(RuntimeError):
    """A command trial's process failed; ``error``: the script's error (its traceback is in the
    trial's error.log already, written by that process), None if it wrote none."""

    def __init__(self, number: int, error: Optional[str]) -> None:
        said = f": {error}" if error else " (its output above says why)"
        super().__init__(f"trial {number}: its command failed{said}")
        self.traceback_logged = error is not None


def _frozen(study: optuna.Study, trial: optuna.Trial) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)


def _current_attrs(study: optuna.Study, trial: optuna.Trial) -> Dict[str, Any]:
    """The trial's user attributes as the storage has them now (a child process may have
    written them)."""
    return dict(_frozen(study, trial).user_attrs)


def _current_values(study: optuna.Study, trial: optuna.Trial) -> Dict[int, float]:
    return dict(_frozen(study, trial).intermediate_values)


def _child_environment(run: TrialRun) -> Dict[str, str]:
    """What a trial is told: where to report (the search), who it is (the experiment id and
    its number, recorded in its checkpoints), and Determined's cluster info: its
    hyperparameters, seed and latest checkpoint ($DET_LIGHTNING_LATEST_CHECKPOINT=latest for
    a command's script that passes none); a model_def trial's process gets the worker's whole
    environment with it."""
    from det_lightning._info import ClusterInfo, TrialInfo

    plan, number = run.worker.plan, run.number
    identity = {"experiment_id": plan.experiment_id, "trial": number}
    search = {
        RUN_IDENTITY_ENV: json.dumps(identity),
        SEARCH_ENV: search_environment(
            run.worker.storage_ref,
            run.study.study_name,
            trial_id(run.trial),
            run.worker.settings,
            bracket=run.bracket,
        ),
    }
    latest = newest_checkpoint(plan.checkpoint_root / f"trial-{number}")
    info = ClusterInfo(
        TrialInfo(number, 0, run.hparams, plan.config.raw, trial_seed=run.trial_seed),
        latest_checkpoint=str(latest) if latest else None,
    ).to_environment()
    if plan.trial_class is not None:  # the harness passes hparams and lengths to init()/fit()
        return {**os.environ, TRIAL_INFO_ENV: info, **search}
    return {TRIAL_INFO_ENV: info, LATEST_CHECKPOINT_ENV: "latest", **search}
