"""Leases: which worker trains a trial, kept in the search's Optuna storage.

A worker that trains a trial renews a lease on it (user attribute ``lease``: its host, pid,
token and the time it last renewed) every ``interval`` seconds. A trial whose lease has not
been renewed for ``timeout`` seconds (or that never got one: its worker died between
``study.ask()`` and the first lease) is *expired*; on the same host a dead pid expires it at
once. Any live worker, on any machine, may take an expired trial over::

    take_over(study, frozen)
      marks it superseded, then moves it RUNNING -> FAIL   the one transition only one caller
                                                           can win: a finished trial cannot be
                                                           finished again (the journal replays
                                                           in order, a database row is locked)
      the winner enqueues its continuation                 same hyperparameters, trial number,
                                                           rung results; WAITING
      and pops it (WAITING -> RUNNING)                     again one winner: this worker, or
                                                           another's study.ask()
    whoever runs the continuation resumes it from the trial's latest checkpoint

Optuna's own heartbeat (``heartbeat_interval`` on RDB storages) only covers trials run by
``study.optimize()`` on a database; our workers use ask-and-tell on a journal file or a
database, so the lease lives in user attributes, which every storage keeps and shares. The
takeover mirrors Optuna's ``RetryFailedTrialCallback`` (fail the stale trial, enqueue a copy).
Expiry compares the renewing worker's clock with the reader's: machines need clocks within a
small part of ``timeout`` of each other (NTP), as for Optuna's heartbeat.
"""

import dataclasses
import datetime
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, Optional, Union

import optuna
from optuna.exceptions import UpdateFinishedTrialError

from det_lightning._job_processes import pid_alive
from det_lightning._runner._optuna import live_trial, storage_of, study_id, trial_id
from det_lightning._runner._serial import creating
from det_lightning._runner._trial_record import (
    CLAIM,
    CONTINUES,
    HOST,
    LEASE,
    ORIGIN,
    PID,
    SUPERSEDED,
    SURPLUS,
    TRIAL_NUMBER,
)

logger = logging.getLogger("det_lightning")

BRACKET = "-bracket-"  # a search's studies are named <search key>-bracket-<i>
HOST_ID_ENV = "DET_LIGHTNING_HOST_ID"  # names this machine (default: its host name)
DEFAULT_TIMEOUT_S = 120.0
# Attributes of the worker, not of the trial: a continuation starts without them.
_WORKER_ATTRS = (LEASE, SUPERSEDED, CONTINUES, HOST, PID, CLAIM)


def host_id() -> str:
    """This machine's name in leases: ``$DET_LIGHTNING_HOST_ID``, else the host name."""
    return os.environ.get(HOST_ID_ENV, "").strip() or socket.gethostname()


@dataclasses.dataclass(frozen=True)
class LeaseSettings:
    """``--heartbeat-timeout``: how long a lease lasts without renewal."""

    timeout: float = DEFAULT_TIMEOUT_S

    @property
    def interval(self) -> float:
        """How often a worker renews: often enough that a few missed renewals never expire it.

        >>> LeaseSettings().interval, LeaseSettings(8).interval
        (10.0, 2.0)
        """
        return min(10.0, self.timeout / 4)


def expired(
    attrs: Dict[str, Any],
    started: Optional[datetime.datetime],
    now: float,
    timeout: float,
    *,
    host: str,
    alive: Callable[[int], bool] = pid_alive,
) -> bool:
    """Whether a RUNNING trial's lease has expired (pure but for ``alive``).

    Args:
        attrs: the trial's user attributes.
        started: when it became RUNNING (``FrozenTrial.datetime_start``, naive local time).
        now: the time now (``time.time()``).
        timeout: seconds a lease lasts without renewal.
        host: this machine's host id: a lease of this host whose pid is dead is expired now.
        alive: whether a pid lives on this machine.

    >>> leased = {LEASE: {"host": "a", "pid": 7, "renewed": 100.0}}
    >>> expired(leased, None, 150.0, 60, host="b"), expired(leased, None, 161.0, 60, host="b")
    (False, True)
    >>> expired(leased, None, 101.0, 60, host="a", alive=lambda pid: False)  # dead, here
    True
    >>> start = datetime.datetime.fromtimestamp(100.0)  # never leased
    >>> expired({}, start, 150.0, 60, host="b"), expired({}, start, 161.0, 60, host="b")
    (False, True)
    """
    lease = attrs.get(LEASE)
    if isinstance(lease, dict) and lease.get("host") == host:
        if not alive(int(lease.get("pid", -1))):
            return True
    return now > expires_at(attrs, started, timeout)


def expires_at(
    attrs: Dict[str, Any], started: Optional[datetime.datetime], timeout: float
) -> float:
    """When a RUNNING trial's lease expires unless renewed (``time.time()`` seconds): its last
    renewal, or its start if never leased, plus ``timeout``.

    >>> expires_at({LEASE: {"renewed": 100.0}}, None, 60), expires_at({}, None, 60)
    (160.0, 0.0)
    """
    lease = attrs.get(LEASE)
    if isinstance(lease, dict):
        return float(lease.get("renewed", 0.0)) + timeout
    return started.timestamp() + timeout if started is not None else 0.0


def take_over(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> Optional[optuna.Trial]:
    """Takes the expired trial ``frozen`` over: its continuation, RUNNING for this worker, or
    None when another worker won it (or its own worker finished it meanwhile)."""
    storage = storage_of(study)
    try:
        storage.set_trial_user_attr(trial_id(frozen), SUPERSEDED, True)
        number = _numbered(study, frozen)
        storage.set_trial_state_values(trial_id(frozen), optuna.trial.TrialState.FAIL)
    except UpdateFinishedTrialError:
        return None  # finished already: by another worker's takeover, or by its own worker
    attrs = {k: v for k, v in frozen.user_attrs.items() if k not in _WORKER_ATTRS}
    attrs.update({CONTINUES: trial_id(frozen), TRIAL_NUMBER: number, ORIGIN: origin(frozen)})
    study.enqueue_trial(dict(frozen.params), user_attrs=attrs, skip_if_exists=False)
    for waiting in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if waiting.user_attrs.get(CONTINUES) == trial_id(frozen):
            _carry_values(storage, frozen, trial_id(waiting))
            try:
                if storage.set_trial_state_values(
                    trial_id(waiting), optuna.trial.TrialState.RUNNING
                ):
                    return live_trial(study, trial_id(waiting))
            except UpdateFinishedTrialError:
                return None  # popped by another worker and ended since this one listed it
    return None  # another worker's study.ask() popped it first: that worker resumes it


def _numbered(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> int:
    """The trial's number. A trial its worker never numbered (killed between asking for it
    and numbering it), and that no worker creating a trial since has numbered, is numbered
    now, under the lock (``_serial.creating``) and before it ends, so that it and its
    continuation share one number, as a numbered trial and its continuation do: its fallback
    (id + 1) may be the number of a trial asked for since on a storage without the lock, and
    the budget counts trials by number.

    Raises:
        UpdateFinishedTrialError: the trial ended meanwhile.
    """
    if TRIAL_NUMBER in frozen.user_attrs:
        return int(frozen.user_attrs[TRIAL_NUMBER])
    storage = storage_of(study)
    with creating(study, search_name(study)) as serialized:
        current = storage.get_trial(trial_id(frozen)).user_attrs
        if TRIAL_NUMBER in current:  # numbered by another taker meanwhile
            return int(current[TRIAL_NUMBER])
        return number_new_trial(study, live_trial(study, frozen), serialized=serialized)


def _carry_values(storage: Any, frozen: optuna.trial.FrozenTrial, trial_id: int) -> None:
    """Gives the continuation ``trial_id`` the validations its trial reported before the
    takeover: a trial killed after its last validation (and checkpoint) resumes at its end and
    reports nothing more, and its worker tells the study the last value reported."""
    for step, value in frozen.intermediate_values.items():
        try:
            storage.set_trial_intermediate_value(trial_id, step, value)
        except UpdateFinishedTrialError:
            return  # the continuation ended already (another worker popped and ran it)


def trial_number(trial: Union[optuna.Trial, optuna.trial.FrozenTrial]) -> int:
    """The trial's number in the experiment: unique across the storage's studies, and kept by
    the continuation of a trial another worker took over."""
    number = trial.user_attrs.get(TRIAL_NUMBER)
    return int(number) if number is not None else int(trial_id(trial)) + 1


def search_name(study: optuna.Study) -> str:
    """The name the search's studies (its brackets) share (``_serial.creating`` locks it).

    >>> search_name(optuna.create_study(study_name="mnist-3f2a9c01de-bracket-1"))
    'mnist-3f2a9c01de'
    """
    return search_name_of(study.study_name)


def search_name_of(study_name: str) -> str:
    """The search a study of that name belongs to: the name without ``-bracket-<i>``."""
    return study_name.rpartition(BRACKET)[0] or study_name


def number_new_trial(study: optuna.Study, trial: optuna.Trial, *, serialized: bool = False) -> int:
    """Gives ``trial``, just asked for (or the continuation of a trial that was never
    numbered), the experiment's next trial number and returns it. Continuations keep their
    trial's number, so numbers run 1, 2, 3, ... with no gap after a takeover, as Determined's
    do. Surplus trials never count.

    ``serialized`` (trials are created and numbered one at a time: ``_serial.creating``): one
    more than the highest of every trial in the search's studies (its brackets). A running
    trial without a number is then one whose worker died inside the lock, between asking for
    it and numbering it: it is numbered first, in the order trials were asked for, so it takes
    the number it would have had and none is skipped (with ids from a database shared by many
    experiments its fallback, id + 1, could lie far ahead). Otherwise (MySQL, SQLite, the gRPC
    proxy): of the trials asked for before it, a trial not numbered counting with its
    fallback, the number it shows, so a race may leave a gap. A grid's point waiting to be
    asked for never counts: it is numbered when asked for."""
    storage = storage_of(study)
    bracket = study.study_name.rpartition(BRACKET)[0]
    trials = [
        t
        for sibling in storage.get_all_studies()
        if sibling.study_name == study.study_name
        or (bracket and sibling.study_name.rpartition(BRACKET)[0] == bracket)
        for t in storage.get_all_trials(study_id(sibling), deepcopy=False)
        if not t.user_attrs.get(SURPLUS) and trial_id(t) != trial_id(trial)
    ]
    orphans = {
        trial_id(t): t
        for t in trials
        if serialized
        and TRIAL_NUMBER not in t.user_attrs
        and t.state == optuna.trial.TrialState.RUNNING
    }
    numbers = [0] + [
        trial_number(t)
        for t in trials
        if (serialized or trial_id(t) < trial_id(trial))
        and (TRIAL_NUMBER in t.user_attrs or t.state != optuna.trial.TrialState.WAITING)
        and trial_id(t) not in orphans
    ]
    number = max(numbers)
    for _, orphan in sorted(orphans.items()):
        try:
            storage.set_trial_user_attr(trial_id(orphan), TRIAL_NUMBER, number + 1)
        except UpdateFinishedTrialError:  # ended unnumbered (by an older version): its fallback
            number = max(number, trial_number(orphan))
            continue
        number += 1
        logger.info(
            "trial %d (asked for by a worker that died before numbering it) is numbered now",
            number,
        )
    number += 1
    trial.set_user_attr(TRIAL_NUMBER, number)
    return number


def origin(trial: Union[optuna.Trial, optuna.trial.FrozenTrial]) -> int:
    """The study's number of the trial as first asked for: a continuation's place in the
    order the search admits trials in is its first ask's."""
    place = trial.user_attrs.get(ORIGIN)
    return int(place) if place is not None else int(trial.number)


def is_superseded(frozen: optuna.trial.FrozenTrial) -> bool:
    """Whether another worker took this trial over (its continuation is the trial now)."""
    return bool(frozen.user_attrs.get(SUPERSEDED)) and (
        frozen.state == optuna.trial.TrialState.FAIL
    )


class LeaseLost(Exception):
    """Another worker took the trial over: this worker stops training it at once."""


def taken_over(number: int) -> LeaseLost:
    """The error a worker ends trial ``number`` with once another worker has taken it over."""
    return LeaseLost(
        f"trial {number} was taken over by another worker: this worker's lease on it lapsed "
        "(not renewed for --heartbeat-timeout seconds: the process was paused or the search's "
        "storage out of reach), and the other worker resumes the trial from its latest "
        "checkpoint, so nothing needs doing; this worker records and publishes nothing more of "
        "it and goes on with the search. If workers are only slow, give them all a longer "
        "--heartbeat-timeout."
    )


def superseded_now(study: optuna.Study, trial_id: int) -> bool:
    """Whether the storage has trial ``trial_id`` taken over by another worker (a storage
    that cannot be read now says no: the caller's own error stands)."""
    try:
        return is_superseded(storage_of(study).get_trial(trial_id))
    except Exception:
        return False


def raise_if_taken_over(trial: optuna.Trial) -> None:
    """Raises ``LeaseLost`` once another worker has taken ``trial`` over, asking the storage:
    while its worker trains it, only a takeover finishes a trial (RUNNING -> FAIL)."""
    if storage_of(trial.study).get_trial(trial_id(trial)).state.is_finished():
        raise taken_over(trial_number(trial))


class LeaseKeeper:
    """Holds the lease on one trial while this worker trains it: taken on entry, renewed
    every ``settings.interval`` seconds by a thread, dropped on exit. When a renewal finds
    the trial finished by another worker, ``on_lost`` is called once (from that thread)."""

    def __init__(
        self,
        study: optuna.Study,
        trial_id: int,
        settings: LeaseSettings,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.storage = storage_of(study)
        self.trial_id = trial_id
        self.settings = settings
        self.on_lost = on_lost
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="det-lightning-lease", daemon=True)
        self.token = uuid.uuid4().hex

    def __enter__(self) -> "LeaseKeeper":
        self.renew()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def renew(self, renewed: Optional[float] = None) -> bool:
        """Writes the lease (``renewed``: now); False once the trial is finished: by another
        worker's takeover (then ``lost`` is set), or by this worker as it ended the trial
        (told the study while this thread renewed)."""
        lease = {
            "host": host_id(),
            "pid": os.getpid(),
            "token": self.token,
            "renewed": time.time() if renewed is None else renewed,
        }
        try:
            self.storage.set_trial_user_attr(self.trial_id, LEASE, lease)
        except UpdateFinishedTrialError:
            if is_superseded(self.storage.get_trial(self.trial_id)):
                self.lost.set()
            return False
        return True

    def release(self) -> None:
        """Lets any worker take the trial over at once (this worker stops without finishing
        it, e.g. on SIGTERM: rerunning resumes it here or elsewhere)."""
        self._stop.set()
        self._thread.join()
        self.renew(renewed=0.0)

    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval):
            try:
                if self.renew():
                    continue
            except Exception:  # a storage hiccup: the next renewal tries again
                logger.warning("could not renew the lease on a trial; retrying", exc_info=True)
                continue
            if not self.lost.is_set():
                return  # this worker ended the trial: nothing to renew
            logger.warning("another worker took this trial over: stopping it here")
            self.on_lost()
            return
