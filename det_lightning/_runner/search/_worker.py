"""Searches on Optuna: trials drawn, recorded and shared through an Optuna storage.

One worker (one ``det-lightning experiment`` process) loops::

    take over a trial whose lease expired, if any (its worker died, on any machine; ``_lease``):
         its continuation resumes from the trial's latest checkpoint
    else pick the bracket furthest from its share of max_trials; study.ask() a trial there,
         its hyperparameters drawn through the trial (Optuna's RandomSampler), or for a grid
         the next waiting point (``_grid``); a trial past the budget (two workers asked at
         once) is dropped unrun
    train it, in a process of its own forked from the worker's warm template (``_template``);
         at each validation the SearchReporter records the searcher metric at the rungs it
         reaches (trial user attribute "rungs") and applies Determined's rule (``_asha.decide``)
         against what the other trials recorded there; a trial ranked out stops through
         context.set_stop_requested (a checkpoint, on_trial_shutdown)
    study.tell(): COMPLETE, PRUNED (stopped at a rung), or FAIL (an error; InvalidHP: not counted)
    no trial left to start, but some still RUNNING elsewhere: wait (logging their pid and host),
         renewing nothing, until they finish or their leases expire (then take them over);
         none left: exit

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
import time
import warnings
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Tuple

import optuna
from optuna.exceptions import UpdateFinishedTrialError

from det_lightning import errors
from det_lightning._env import (
    LATEST_CHECKPOINT_ENV,
    RESUME_ADVICE_ENV,
    RUN_IDENTITY_ENV,
    SEARCH_ENV,
    TRIAL_INFO_ENV,
)
from det_lightning._runner._asha import EXITED_METRIC, Bracket
from det_lightning._runner._lease import (
    CONTINUES,
    SURPLUS,
    TRIAL_NUMBER,
    LeaseKeeper,
    LeaseLost,
    LeaseSettings,
    expired,
    expires_at,
    host_id,
    is_superseded,
    number_new_trial,
    origin,
    superseded_now,
    take_over,
    taken_over,
)
from det_lightning._runner._optuna import trial_id
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._template import TrialStarter
from det_lightning._runner._trial_record import (
    BATCHES,
    CHECKPOINT,
    HOST,
    HPARAMS,
    PID,
    RUNG,
    RUNGS,
    STOPPED,
    TrialRecord,
)
from det_lightning._runner.config import ExperimentConfig
from det_lightning._runner.plan import Plan
from det_lightning._runner.search._child import search_environment
from det_lightning._runner.search._failure import log_failure
from det_lightning._runner.search._grid import has_waiting_point, owns_point
from det_lightning._runner.search._interrupt import SearchInterrupt, search_advice
from det_lightning._runner.search._jobs import run_legacy_process, run_trial
from det_lightning._runner.search._reporter import (
    INVALID_HP,
    counted,
    trial_number,
)
from det_lightning._runner.search._sample import point_index, sampler_for, suggest
from det_lightning._runner.search._storage import open_storage, open_studies, storage_ref
from det_lightning._runner.trial import (
    Launch,
    TrialResult,
    run_command_trial,
    write_trial_hparams,
)
from det_lightning.pytorch import Batch, Epoch
from det_lightning.pytorch._remote import CheckpointRoot, checkpoint_location
from det_lightning.pytorch._units import AnyOf

logger = logging.getLogger("det_lightning")


def admitted(
    study: optuna.Study, trial: optuna.Trial, settings: SearchSettings, bracket: Bracket
) -> bool:
    """Whether a trial ``study.ask()`` just gave is within the search: its own grid point, or
    fewer than the bracket's max_trials counted trials asked for before it."""
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if trial_id(t) == trial_id(trial))
    if settings.grid:
        return owns_point(trials, me)
    place, number = origin(me), trial_number(me)
    earlier = {
        trial_number(t)
        for t in trials
        if origin(t) < place and counted(t) and trial_number(t) != number
    }
    return len(earlier) < bracket.max_trials


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


def expired_trial(
    studies: Sequence[optuna.Study], leases: LeaseSettings
) -> Optional[Tuple[int, optuna.Trial]]:
    """Takes over a RUNNING trial whose lease expired (its worker died, on this machine or
    another, or never took the lease): its continuation, RUNNING for this worker."""
    host, now = host_id(), time.time()
    for index, study in enumerate(studies):
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if not expired(frozen.user_attrs, frozen.datetime_start, now, leases.timeout, host):
                continue
            trial = take_over(study, frozen)
            if trial is not None:
                return index, trial
    return None


def until_an_expiry(studies: Sequence[optuna.Study], leases: LeaseSettings) -> float:
    """Seconds a worker with nothing to start waits before it looks again: until the first
    lease of the trials running elsewhere would expire (a dead worker's trial is taken over
    then, not up to a renewal interval later), at most one interval, at least 50 ms. A live
    worker's lease is renewed every interval, so its expiry stays at least timeout - interval
    away: waiting workers read the storage no more often than before."""
    now, soonest = time.time(), leases.interval
    for study in studies:
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            expiry = expires_at(frozen.user_attrs, frozen.datetime_start, leases.timeout)
            soonest = min(soonest, expiry - now)
    return max(soonest, 0.0) + 0.05


def _others_running(studies: Sequence[optuna.Study]) -> bool:
    """Whether a trial is still RUNNING or waiting (another worker's, or a continuation)."""
    states = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    return any(study.get_trials(deepcopy=False, states=states) for study in studies)


def running_elsewhere(studies: Sequence[optuna.Study]) -> List[str]:
    """The trials other workers train now, each as ``"trial <n> (pid <pid> on <host>)"``."""
    running = []
    for study in studies:
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            record = TrialRecord.of(t)
            if record.counted and not is_superseded(t):
                host = record.host if record.host is not None else "?"
                pid = record.pid if record.pid is not None else "?"
                running.append(f"trial {record.number} (pid {pid} on {host})")
    return running


def next_bracket(studies: Sequence[optuna.Study], settings: SearchSettings) -> Optional[int]:
    """The bracket furthest from its share of max_trials (InvalidHP trials do not count: a
    new trial replaces each), or for a grid its study while a point waits (a point whose
    trial raised InvalidHP is done, as in Determined)."""
    if settings.grid:
        return 0 if has_waiting_point(studies[0]) else None
    if settings.searcher == "single":  # its one trial, whatever became of it (InvalidHP too)
        states = (optuna.trial.TrialState.WAITING,)
        done = any(not t.user_attrs.get(SURPLUS) for t in studies[0].get_trials(deepcopy=False))
        return 0 if studies[0].get_trials(deepcopy=False, states=states) or not done else None
    for index, study in enumerate(studies):  # a taken-over trial's continuation goes first
        if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return index
    best: Optional[Tuple[float, int]] = None
    for index, (study, bracket) in enumerate(zip(studies, settings.brackets)):
        started = len({trial_number(t) for t in study.get_trials(deepcopy=False) if counted(t)})
        if started < bracket.max_trials:
            share = started / bracket.max_trials
            if best is None or share < best[0]:
                best = (share, index)
    return None if best is None else best[1]


def _ask(
    study: optuna.Study,
    settings: SearchSettings,
    index: int,
    space: Dict[str, Any],
    seed: Optional[int],
) -> Optional[optuna.Trial]:
    """A new trial of ``study`` with its hyperparameters, or None when another worker filled
    the budget first (the trial asked for is then dropped unrun); or the continuation of a
    trial another worker took over, if one was waiting."""
    return _admit(study, settings, index, study.ask(), space, seed)


def _unless_taken_over(admit: Callable[..., Optional[optuna.Trial]]) -> Any:
    """``admit``, or None when another worker took the trial over before this one leased it
    (a trial asked for but not leased for ``--heartbeat-timeout`` seconds looks abandoned: a
    worker slowed down that long, e.g. among many on few cores, finds it finished)."""

    @functools.wraps(admit)
    def guarded(study: optuna.Study, *args: Any) -> Optional[optuna.Trial]:
        try:
            return admit(study, *args)
        except (UpdateFinishedTrialError, ValueError):  # study.tell(): "Cannot tell a FAIL trial"
            if not superseded_now(study, trial_id(args[2])):
                raise
            logger.warning("a trial this worker asked for was taken over before it began")
            return None

    return guarded


@_unless_taken_over
def _admit(
    study: optuna.Study,
    settings: SearchSettings,
    index: int,
    trial: optuna.Trial,
    space: Dict[str, Any],
    seed: Optional[int],
) -> Optional[optuna.Trial]:
    """``trial`` with its hyperparameters drawn, or None (told FAIL as surplus) when it is
    past the budget. A continuation of a trial that had drawn them keeps them."""
    if HPARAMS in trial.user_attrs:  # a continuation
        _suggest(trial, space)  # its own point again (fixed), so the study records it
        return trial
    if TRIAL_NUMBER not in trial.user_attrs:
        number_new_trial(study, trial)
    # The sampler is read when the trial draws (suggest), not when it is asked for.
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if trial_id(t) == trial_id(trial))
    study.sampler = sampler_for(seed, index, point_index(trials, origin(me), SURPLUS))
    if not admitted(study, trial, settings, settings.brackets[index]):
        trial.set_user_attr(SURPLUS, True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    trial.set_user_attr(HPARAMS, _suggest(trial, space))
    trial.set_user_attr(HOST, host_id())
    trial.set_user_attr(PID, os.getpid())
    return trial


def _suggest(trial: optuna.Trial, space: Dict[str, Any]) -> Dict[str, Any]:
    with warnings.catch_warnings():
        # A grid's last double can be one ulp past maxval, as in Determined (``config._search``).
        warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
        return suggest(trial, space)


@dataclasses.dataclass(frozen=True)
class SearchOutcome:
    """What one worker's run of a search ends with: every trial's result, and the signal that
    interrupted the run (None: it ran until no trial was left to start)."""

    trials: List[TrialResult]
    interrupted_by: Optional[str] = None


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
    resume: bool
    lost: threading.Event


def search_summary(plan: Plan, storage_url: Optional[str] = None) -> List[TrialResult]:
    """Every trial of the plan's search as it stands, training nothing."""
    storage = open_storage(storage_url, plan.checkpoint_root)
    studies = open_studies(storage, plan.experiment_id, plan.search)
    return summarize(studies, plan, plan.search)


def run_search(plan: Plan, storage_url: Optional[str] = None) -> SearchOutcome:
    """Runs (or continues) the plan's search until no trial is left to start, or a signal
    stops it (``_interrupt``)."""
    settings = plan.search
    storage = open_storage(storage_url, plan.checkpoint_root)
    studies = open_studies(storage, plan.experiment_id, settings)
    os.environ[RESUME_ADVICE_ENV] = search_advice(sys.argv[1:])  # a trial's, after a signal
    with SearchInterrupt() as interrupt:
        reference = storage_ref(storage_url, plan.checkpoint_root)
        stopped = _work(plan, settings, studies, reference, interrupt)
    interrupted = frozenset() if stopped is None else frozenset({stopped})
    return SearchOutcome(summarize(studies, plan, settings, interrupted), interrupt.received)


def _work(
    plan: Plan,
    settings: SearchSettings,
    studies: Sequence[optuna.Study],
    reference: str,
    interrupt: SearchInterrupt,
) -> Optional[int]:
    """Trains one trial after another until none is left to start or to take over, or a
    signal arrived; returns the number of the trial a signal stopped, if one did."""
    leases = LeaseSettings(plan.heartbeat_timeout)
    with TrialStarter() as starter:  # each trial in its own process, forked from a warm one
        launch = functools.partial(run_trial, starter, interrupt)
        worker = WorkerSetup(plan, settings, reference, launch)
        return _loop(worker, studies, interrupt, leases)


def _loop(
    worker: WorkerSetup,
    studies: Sequence[optuna.Study],
    interrupt: SearchInterrupt,
    leases: LeaseSettings,
) -> Optional[int]:
    settings, config = worker.settings, worker.plan.config
    seed = config.experiment_seed()
    waited_for: List[str] = []
    while interrupt.received is None:
        found = expired_trial(studies, leases)
        if found is None:
            index = next_bracket(studies, settings)
            if index is None:
                if not _others_running(studies):
                    break
                waited_for = _note_waiting(worker.plan.experiment_id, studies, waited_for)
                _wait(until_an_expiry(studies, leases), interrupt)  # or until they finish
                continue
            asked = _ask(studies[index], settings, index, config.hyperparameters, seed)
            if asked is None:
                continue
            found = (index, asked)
        elif (
            _admit(studies[found[0]], settings, found[0], found[1], config.hyperparameters, seed)
            is None
        ):
            continue  # taken over before it had drawn its point: past the budget after all
        index, trial = found
        study, bracket = studies[index], settings.brackets[index]
        resume = CONTINUES in trial.user_attrs
        hparams = trial.user_attrs[HPARAMS]
        number = trial_number(trial)
        where = (
            f"bracket {index}, rungs at {list(bracket.rung_units)} {settings.time_metric}"
            if bracket.rung_units
            else settings.searcher
        )
        taken = " resumed (its worker's lease expired)" if resume else ""
        logger.info(f"trial {number} ({where}){taken}: {hparams}")
        with LeaseKeeper(study, trial_id(trial), leases) as keeper:
            try:
                _run_trial(
                    TrialRun(worker, study, bracket, trial, number, hparams, resume, keeper.lost)
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


def _note_waiting(
    experiment_id: str, studies: Sequence[optuna.Study], logged: List[str]
) -> List[str]:
    """Logs which trials this worker waits for (another start of the same experiment, or
    another worker), with their pid and host, when that changes; returns what it logged."""
    running = running_elsewhere(studies)
    if running and running != logged:
        logger.info(
            f"experiment {experiment_id}: {', '.join(running)} running in another worker; "
            "waiting for it (this worker trains nothing of it unless its lease expires)"
        )
        return running
    return logged


def _wait(seconds: float, interrupt: SearchInterrupt) -> None:
    deadline = time.monotonic() + seconds
    while interrupt.received is None and time.monotonic() < deadline:
        time.sleep(min(0.2, max(deadline - time.monotonic(), 0.0)))


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
            return run_legacy_process(launch, plan, number, hparams, lengths, "latest", env, lost)
        result = run_command_trial(plan, number, hparams, extra_env=env, lost=lost, launch=launch)
        invalid = _current_attrs(study, trial).get(INVALID_HP)
        if invalid:  # the script raised InvalidHP (_child.report_invalid_hp)
            raise errors.InvalidHP(str(invalid))
        if result.status != "COMPLETED":
            raise RuntimeError(f"trial {number}: its command failed")
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
            log_failure(plan.checkpoint_root, number, e, "the search goes on without it")
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
        result.batches if result.batches is not None else (max(values) if values else None),
    )
    if attrs.get(STOPPED):
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


def _child_environment(run: TrialRun) -> Dict[str, str]:
    """What a trial is told: where to report (the search) and who it is (the experiment id and
    its number, recorded in its checkpoints); a command trial also its hyperparameters and
    latest checkpoint, as Determined's cluster info ($DET_LIGHTNING_LATEST_CHECKPOINT=latest
    for a script that passes none); a model_def trial's process gets the worker's whole
    environment with it."""
    from det_lightning._info import ClusterInfo, TrialInfo
    from det_lightning.pytorch import _checkpoint as ckpt

    plan, number = run.worker.plan, run.number
    identity = {"experiment_id": plan.experiment_id, "trial": number}
    search = {
        RUN_IDENTITY_ENV: json.dumps(identity),
        SEARCH_ENV: search_environment(
            run.worker.storage_ref,
            run.study.study_name,
            trial_id(run.trial),
            run.worker.settings,
            run.bracket,
        ),
    }
    if plan.trial_class is not None:  # the harness passes hparams and lengths to init()/fit()
        return {**os.environ, **search}
    latest = ckpt.latest_checkpoint(plan.checkpoint_root / f"trial-{number}")
    info = ClusterInfo(
        TrialInfo(number, 0, run.hparams, plan.config.raw),
        latest_checkpoint=str(latest) if latest else None,
    )
    return {TRIAL_INFO_ENV: info.to_environment(), LATEST_CHECKPOINT_ENV: "latest", **search}


def _unfinished_checkpoint(plan: Plan, number: int, status: str) -> Optional[CheckpointRoot]:
    """The latest checkpoint of a trial that did not finish (interrupted, running elsewhere,
    failed), which records none: what resuming it starts from."""
    from det_lightning.pytorch import _checkpoint as ckpt

    if status not in ("INTERRUPTED", "RUNNING", "ERROR"):
        return None
    return ckpt.latest_checkpoint(plan.checkpoint_root / f"trial-{number}")


def _status(frozen: optuna.trial.FrozenTrial, interrupted: AbstractSet[int], timeout: float) -> str:
    """A trial's state in the summary: RUNNING only while a live worker holds its lease."""
    states = optuna.trial.TrialState
    if frozen.state == states.RUNNING:
        gone = expired(frozen.user_attrs, frozen.datetime_start, time.time(), timeout, host_id())
        return "INTERRUPTED" if gone or trial_number(frozen) in interrupted else "RUNNING"
    return {states.COMPLETE: "COMPLETED", states.PRUNED: "STOPPED_EARLY", states.FAIL: "ERROR"}.get(
        frozen.state, frozen.state.name
    )


def summarize(
    studies: Sequence[optuna.Study],
    plan: Plan,
    settings: SearchSettings,
    interrupted: AbstractSet[int] = frozenset(),
) -> List[TrialResult]:
    """Every trial of the search as the experiment's summary table reads it (``interrupted``:
    trials this process stopped for a signal)."""
    results = []
    for study in studies:
        for frozen in study.get_trials(deepcopy=False):
            record = TrialRecord.of(frozen)
            invalid = settings.searcher == "single" and record.invalid_hp
            if (
                not (record.counted or invalid)
                or is_superseded(frozen)
                or frozen.state == optuna.trial.TrialState.WAITING
            ):
                continue
            values = list(frozen.intermediate_values.values())
            best = None
            if values:
                best = min(values) if settings.smaller_is_better else max(values)
            status = (
                "INVALID_HP" if invalid else _status(frozen, interrupted, plan.heartbeat_timeout)
            )
            checkpoint = record.checkpoint
            stopped_at = status == "STOPPED_EARLY" and RUNG in frozen.user_attrs
            results.append(
                TrialResult(
                    record.number,
                    record.hparams,
                    status,
                    best,
                    checkpoint_location(checkpoint)
                    if checkpoint
                    else _unfinished_checkpoint(plan, record.number, status),
                    batches=record.batches,
                    rung=record.rung if stopped_at else None,
                )
            )
    return sorted(results, key=lambda r: r.number)
