"""A worker with nothing to start: taking over a trial whose lease expired, the trials other
workers run (logged with their pid and host when that changes), and how long to wait before
looking again (until the first of their leases would expire, or sooner: when one of those
trials ends or another starts)."""

import logging
import time
from typing import FrozenSet, List, Optional, Sequence, Tuple

import optuna

from det_lightning._runner._lease import (
    LeaseSettings,
    expired,
    expires_at,
    host_id,
    is_superseded,
    take_over,
)
from det_lightning._runner._optuna import rdb_of, storage_of, trial_id
from det_lightning._runner._trial_record import TrialRecord
from det_lightning._runner.search._interrupt import SearchInterrupt

logger = logging.getLogger("det_lightning")


def expired_trial(
    studies: Sequence[optuna.Study], leases: LeaseSettings
) -> Optional[Tuple[int, optuna.Trial]]:
    """Takes over a RUNNING trial whose lease expired (its worker died, on this machine or
    another, or never took the lease): its continuation, RUNNING for this worker."""
    host, now = host_id(), time.time()
    for index, study in enumerate(studies):
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if not expired(
                frozen.user_attrs, frozen.datetime_start, now, leases.timeout, host=host
            ):
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
    away. (``wait_a_while`` ends the wait sooner when a trial ends or starts.)"""
    now, soonest = time.time(), leases.interval
    for study in studies:
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            expiry = expires_at(frozen.user_attrs, frozen.datetime_start, leases.timeout)
            soonest = min(soonest, expiry - now)
    return max(soonest, 0.0) + 0.05


def others_running(studies: Sequence[optuna.Study]) -> bool:
    """Whether a trial is still RUNNING or waiting (another worker's, or a continuation)."""
    return bool(unfinished(studies))


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


def note_waiting(
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


# How often a waiting worker reads which trials are unfinished: a journal file is a local file
# read from where it was last read; a database is a query (per waiting worker and second).
CHECK_JOURNAL_S = 0.2
CHECK_DATABASE_S = 1.0


def unfinished(studies: Sequence[optuna.Study]) -> FrozenSet[int]:
    """The ids of the trials RUNNING or WAITING in ``studies``: a lease renewal leaves them as
    they are; a trial that ends or starts changes them."""
    states = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    return frozenset(
        trial_id(t) for study in studies for t in study.get_trials(deepcopy=False, states=states)
    )


def wait_a_while(
    seconds: float, interrupt: SearchInterrupt, studies: Sequence[optuna.Study] = ()
) -> None:
    """Waits ``seconds``, less if a signal arrives or, given ``studies``, once a trial of theirs
    ends or starts (another worker finished the trial this one waits for, say: the search's
    last, or the one whose result a promotion needs). Without that, a worker waiting for
    another's last trial would end up to a renewal interval (10 s) after it."""
    deadline = time.monotonic() + seconds
    every = CHECK_DATABASE_S if any(rdb_of(storage_of(s)) for s in studies) else CHECK_JOURNAL_S
    before = unfinished(studies) if studies else frozenset()
    if studies and not before:
        return  # the last one ended since the caller looked: look again now
    check = time.monotonic() + every
    while interrupt.received is None and time.monotonic() < deadline:
        time.sleep(min(0.2, max(deadline - time.monotonic(), 0.0)))
        if studies and time.monotonic() >= check:
            if unfinished(studies) != before:
                return
            check = time.monotonic() + every
