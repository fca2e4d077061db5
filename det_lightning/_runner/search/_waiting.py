"""A worker with nothing to start: taking over a trial whose lease expired, the trials other
workers run (logged with their pid and host when that changes), and how long to wait before
looking again (until the first of their leases would expire)."""

import logging
import time
from typing import List, Optional, Sequence, Tuple

import optuna

from det_lightning._runner._lease import (
    LeaseSettings,
    expired,
    expires_at,
    host_id,
    is_superseded,
    take_over,
)
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
    away: waiting workers read the storage no more often than before."""
    now, soonest = time.time(), leases.interval
    for study in studies:
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            expiry = expires_at(frozen.user_attrs, frozen.datetime_start, leases.timeout)
            soonest = min(soonest, expiry - now)
    return max(soonest, 0.0) + 0.05


def others_running(studies: Sequence[optuna.Study]) -> bool:
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


def wait_a_while(seconds: float, interrupt: SearchInterrupt) -> None:
    deadline = time.monotonic() + seconds
    while interrupt.received is None and time.monotonic() < deadline:
        time.sleep(min(0.2, max(deadline - time.monotonic(), 0.0)))
