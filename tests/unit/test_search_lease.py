"""Leases on a real Optuna journal file: one takeover wins, a lost lease is noticed."""

import pathlib
import threading
import time
from typing import List, Optional

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from det_lightning._runner import _lease
from det_lightning._runner._lease import LeaseKeeper, LeaseSettings, take_over


def _study(journal: pathlib.Path) -> optuna.Study:
    """The study as one worker process sees it: its own storage object on the shared file."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(journal)))
    return optuna.create_study(study_name="s", storage=storage, load_if_exists=True)


def _running_trial(journal: pathlib.Path) -> optuna.trial.FrozenTrial:
    study = _study(journal)
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    trial.set_user_attr("hparams", {"x": trial.params["x"]})
    trial.set_user_attr("rungs", {"0": 0.5})
    trial.set_user_attr("host", "dead-machine")
    return study.get_trials(deepcopy=False)[0]


def test_of_workers_racing_to_take_a_trial_over_exactly_one_wins(tmp_path: pathlib.Path) -> None:
    journal = tmp_path / "search.journal"
    frozen = _running_trial(journal)
    studies = [_study(journal) for _ in range(6)]
    won: List[Optional[optuna.Trial]] = [None] * len(studies)
    start = threading.Barrier(len(studies))

    def contend(index: int) -> None:
        start.wait()
        won[index] = take_over(studies[index], frozen)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(studies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [trial for trial in won if trial is not None]
    trials = _study(journal).get_trials(deepcopy=False)
    continuations = [t for t in trials if t.user_attrs.get(_lease.CONTINUES) == frozen._trial_id]
    assert len(winners) <= 1 and len(continuations) == 1
    (continuation,) = continuations
    assert _lease.is_superseded(trials[0]) and trials[0].state == optuna.trial.TrialState.FAIL
    assert continuation.user_attrs["hparams"] == frozen.user_attrs["hparams"]
    assert continuation.user_attrs["rungs"] == {"0": 0.5}  # its rung results carry over
    # Never numbered (its worker died first): numbered once by the takers, shared by both.
    assert continuation.user_attrs[_lease.TRIAL_NUMBER] == 1
    assert trials[0].user_attrs[_lease.TRIAL_NUMBER] == 1
    assert "host" not in continuation.user_attrs  # the dead worker's, not the trial's
    if winners:
        assert continuation.state == optuna.trial.TrialState.RUNNING
        (trial,) = winners
    else:  # popped by nobody yet: the next study.ask() of any worker gets it
        assert continuation.state == optuna.trial.TrialState.WAITING
        trial = _study(journal).ask()
    assert trial._trial_id == continuation._trial_id
    assert trial.suggest_float("x", 0, 1) == frozen.params["x"]  # the same point, drawn again


def test_a_finished_trial_cannot_be_taken_over(tmp_path: pathlib.Path) -> None:
    journal = tmp_path / "search.journal"
    frozen = _running_trial(journal)
    _study(journal).tell(frozen._trial_id, 0.25)  # its worker finished it meanwhile
    assert take_over(_study(journal), frozen) is None
    assert [t.state for t in _study(journal).get_trials()] == [optuna.trial.TrialState.COMPLETE]


def test_the_keeper_renews_and_notices_when_another_worker_takes_over(
    tmp_path: pathlib.Path,
) -> None:
    journal = tmp_path / "search.journal"
    frozen = _running_trial(journal)
    lost = threading.Event()
    settings = LeaseSettings(timeout=0.2)  # renews every 0.05 s
    with LeaseKeeper(_study(journal), frozen._trial_id, settings, on_lost=lost.set) as keeper:
        first = _study(journal).get_trials()[0].user_attrs[_lease.LEASE]
        assert first["token"] == keeper.token and first["pid"] > 0
        deadline = time.monotonic() + 60
        while (
            _study(journal).get_trials()[0].user_attrs[_lease.LEASE]["renewed"] == first["renewed"]
        ):
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.01)
        assert take_over(_study(journal), frozen) is not None
        assert lost.wait(60) and keeper.lost.is_set()


def test_a_released_lease_expires_at_once(tmp_path: pathlib.Path) -> None:
    journal = tmp_path / "search.journal"
    frozen = _running_trial(journal)
    keeper = LeaseKeeper(_study(journal), frozen._trial_id, LeaseSettings(timeout=3600))
    with keeper:
        attrs = _study(journal).get_trials()[0].user_attrs
        assert not _lease.expired(attrs, None, time.time(), 3600, host="elsewhere")
        keeper.release()
    attrs = _study(journal).get_trials()[0].user_attrs
    assert _lease.expired(attrs, None, time.time(), 3600, host="elsewhere")


def test_the_host_id_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_lease.HOST_ID_ENV, "machine-b")
    assert _lease.host_id() == "machine-b"
    monkeypatch.delenv(_lease.HOST_ID_ENV)
    assert _lease.host_id()


def test_trial_numbers_run_on_after_a_takeover(tmp_path: pathlib.Path) -> None:
    """Determined numbers trials 1, 2, 3, ...: a continuation keeps its trial's number and
    takes none of its own; brackets share the numbers, another search's studies do not."""
    from det_lightning._runner._search_settings import SearchSettings
    from det_lightning._runner.search import _worker

    storage = JournalStorage(JournalFileBackend(str(tmp_path / "search.journal")))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    bracket_0, bracket_1, other = (
        optuna.create_study(study_name=name, storage=storage)
        for name in ("k-bracket-0", "k-bracket-1", "other-bracket-0")
    )
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    settings = SearchSettings.from_upfront({"name": "random", "metric": "m", "max_trials": 9}, {})

    def ask(study: optuna.Study) -> optuna.Trial:
        trial = _worker._ask(study, settings, 0, space, seed=None)
        assert trial is not None
        return trial

    first = ask(bracket_0)
    ask(other)  # another search in the same database
    assert _lease.trial_number(ask(bracket_1)) == 2
    (frozen,) = [t for t in bracket_0.get_trials() if t._trial_id == first._trial_id]
    continuation = take_over(bracket_0, frozen)
    assert continuation is not None and _lease.trial_number(continuation) == 1
    assert [_lease.trial_number(ask(s)) for s in (bracket_0, bracket_1)] == [3, 4]
    assert _lease.trial_number(ask(other)) == 2


def test_a_continuation_carries_the_validations_its_trial_reported(
    tmp_path: pathlib.Path,
) -> None:
    """A trial killed after its last validation and checkpoint resumes at its end and reports
    nothing more: its worker then tells the study the value its trial reported before."""
    journal = tmp_path / "search.journal"
    _running_trial(journal)
    study = _study(journal)
    study._storage.set_trial_intermediate_value(0, 4, 0.5)
    study._storage.set_trial_intermediate_value(0, 16, 0.25)
    continuation = take_over(study, study.get_trials(deepcopy=False)[0])
    assert continuation is not None
    frozen = _study(journal).get_trials(deepcopy=False)[-1]
    assert frozen.intermediate_values == {4: 0.5, 16: 0.25}


def test_the_keeper_stops_quietly_once_its_own_worker_ends_the_trial(
    tmp_path: pathlib.Path,
) -> None:
    """A renewal racing the worker's own study.tell() finds the trial finished, not taken
    over: the keeper stops without calling it lost (no "another worker took it over")."""
    journal = tmp_path / "search.journal"
    frozen = _running_trial(journal)
    lost = threading.Event()
    keeper = LeaseKeeper(_study(journal), frozen._trial_id, LeaseSettings(0.2), on_lost=lost.set)
    with keeper:
        _study(journal).tell(frozen._trial_id, 0.25)
        keeper._thread.join(60)  # its next renewal finds the trial finished and stops
        assert not keeper._thread.is_alive()
    assert not keeper.lost.is_set() and not lost.is_set()


def test_a_trial_taken_over_before_its_worker_drew_it_is_dropped_by_that_worker(
    tmp_path: pathlib.Path,
) -> None:
    """A worker slowed down between study.ask() and its first lease (many workers on few
    cores) finds its trial taken over: it drops the trial instead of failing."""
    from det_lightning._runner._search_settings import SearchSettings
    from det_lightning._runner.config import Lengths
    from det_lightning._runner.search._worker import _admit

    searcher = {"name": "random", "metric": "loss", "max_trials": 4, "max_length": {"batches": 8}}
    settings = SearchSettings.from_searcher(
        searcher, Lengths.from_config({"searcher": searcher}), 8
    )
    journal = tmp_path / "search.journal"
    mine = _study(journal).ask()
    other = _study(journal)
    assert take_over(other, other.get_trials(deepcopy=False)[0]) is not None
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    assert _admit(_study(journal), settings, 0, mine, space=space, seed=3) is None
    # Past the budget too (max_trials 1, an earlier trial counted): its surplus tell is refused.
    one = {**searcher, "max_trials": 1}
    full = SearchSettings.from_searcher(one, Lengths.from_config({"searcher": one}), 8)
    surplus = _study(journal).ask()
    other = _study(journal)
    assert take_over(other, other.get_trials(deepcopy=False)[-1]) is not None
    assert _admit(_study(journal), full, 0, surplus, space=space, seed=3) is None


def test_a_waiting_worker_wakes_when_the_first_lease_would_expire() -> None:
    """Nothing to start, others running: the worker looks again when the first of their
    leases would expire (a dead worker's trial is taken over then), else after one renewal
    interval; a live lease, renewed every interval, never makes it look more often."""
    from det_lightning._runner.search._worker import until_an_expiry

    leases = LeaseSettings(8.0)  # renewed every 2 s
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    live, dying = study.ask(), study.ask()
    now = time.time()
    live.set_user_attr(_lease.LEASE, {"host": "a", "pid": 1, "renewed": now})
    assert 2.0 <= until_an_expiry([study], leases) <= 2.1
    dying.set_user_attr(_lease.LEASE, {"host": "b", "pid": 2, "renewed": now - 7.0})
    waited = until_an_expiry([study], leases)  # its lease lapses 1 s after ``now``
    late = time.time() - now  # however busy the machine: the wait shrinks by what passed
    assert 1.05 - late - 0.01 <= waited <= 1.06, (waited, late)
    dying.set_user_attr(_lease.LEASE, {"host": "b", "pid": 2, "renewed": now - 30.0})
    assert until_an_expiry([study], leases) == pytest.approx(0.05)  # expired: look now
    study.tell(live, 1.0)
    study.tell(dying, 1.0)
    assert 2.0 <= until_an_expiry([study], leases) <= 2.1  # nothing running: one interval


@pytest.mark.parametrize("kind", ["journal", "database"])
def test_a_waiting_worker_looks_again_when_a_trial_ends_not_when_a_lease_is_renewed(
    tmp_path: pathlib.Path, kind: str
) -> None:
    """The wait ``until_an_expiry`` gives is cut short when another worker's trial ends (the
    search's last one, say: this worker then finishes at once, not a renewal interval later),
    and not by that worker renewing its lease."""
    from det_lightning._runner.search._interrupt import SearchInterrupt
    from det_lightning._runner.search._waiting import wait_a_while

    def storage() -> "optuna.storages.BaseStorage":
        if kind == "journal":
            return JournalStorage(JournalFileBackend(str(tmp_path / "search.journal")))
        return optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'search.db'}")

    waiting = optuna.create_study(storage=storage(), study_name="s")
    other = optuna.load_study(study_name="s", storage=storage())  # another worker's view
    running = other.ask()

    def renew() -> None:
        for _ in range(5):
            running.set_user_attr(_lease.LEASE, {"host": "b", "pid": 2, "renewed": time.time()})
            time.sleep(0.1)

    renewer = threading.Thread(target=renew)
    started = time.monotonic()
    renewer.start()
    wait_a_while(1.5, SearchInterrupt(), [waiting])
    renewer.join()
    assert time.monotonic() - started >= 1.5  # renewals do not wake it

    ender = threading.Timer(0.3, lambda: other.tell(running, 1.0))
    started = time.monotonic()
    ender.start()
    wait_a_while(120.0, SearchInterrupt(), [waiting])
    waited = time.monotonic() - started
    ender.join()
    assert 0.3 <= waited < 60.0, waited  # woken by the trial's end, not the deadline

    started = time.monotonic()  # nothing unfinished any more: no wait at all
    wait_a_while(120.0, SearchInterrupt(), [waiting])
    assert time.monotonic() - started < 60.0
