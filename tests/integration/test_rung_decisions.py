"""Rung decisions one at a time in a study, across processes (``_runner/_serial.py``).

The scale drill's finding at its smallest: two trials reach a rung together; each reads the
rung, then writes its result. Here trial A, having read, waits for B to read too: without the
lock B reads the rung without A's result and decides as if A were not there (the drill saw 2-5
such decisions in ~640). With it, B's read waits until A has written, on PostgreSQL (an
advisory lock) and on the journal file (a file lock). Each reporter has a storage of its own,
as two processes would: two engines, two connections, two journal readers.
"""

import pathlib
import threading
import types
from typing import Any, Callable, List, Tuple

import optuna
import pytest

from det_lightning._runner import _serial
from det_lightning._runner._asha import Bracket
from det_lightning._runner._lease import TRIAL_NUMBER
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner.search import _reporter
from det_lightning._runner.search._storage import open_storage
from tests.fixtures.postgres import ConnectionCounter

BRACKET = Bracket(num_rungs=2, max_trials=2, max_concurrent_trials=2, rung_units=(1, 4))
SETTINGS = SearchSettings(
    metric="loss",
    smaller_is_better=True,
    time_metric="batches",
    max_time=4,
    max_trials=2,
    divisor=2.0,
    brackets=[BRACKET],
)


def _context() -> Any:
    """What the reporter asks of a trial's context: rank 0, one batch trained, stop."""
    context = types.SimpleNamespace(distributed=types.SimpleNamespace(rank=0), stop=False)
    context.current_train_batch = lambda: 0
    context.set_stop_requested = lambda stop: setattr(context, "stop", stop)
    return context


def _storages(request: pytest.FixtureRequest, tmp_path: pathlib.Path, kind: str) -> List[Any]:
    if kind == "postgresql":
        url = request.getfixturevalue("postgres_url")
        opened = [open_storage(url, tmp_path) for _ in range(2)]
        request.addfinalizer(lambda: [s._backend.engine.dispose() for s in opened])
        return opened
    return [open_storage(str(tmp_path / "search.journal"), tmp_path) for _ in range(2)]


def _race(
    storages: List[Any], wait_s: float, monkeypatch: pytest.MonkeyPatch
) -> Tuple[List[str], Any, Any]:
    """A (loss 1.0) and B (loss 2.0) report rung 0 at once; A, having read, waits up to
    ``wait_s`` for B's read. Returns the order of reads and writes, and both contexts."""
    first = optuna.create_study(study_name="bracket-0", storage=storages[0])
    a_trial = first.ask()
    second = optuna.load_study(study_name="bracket-0", storage=storages[1])
    b_trial = second.ask()
    for number, trial in ((1, a_trial), (2, b_trial)):
        trial.set_user_attr(TRIAL_NUMBER, number)
    # Each reporter holds its own storage's objects: the trial asked through the other
    # storage is reached through this one (as a trial's process gets its trial by id).
    a_live = optuna.Trial(first, a_trial._trial_id)
    b_live = optuna.Trial(second, b_trial._trial_id)
    order: List[str] = []
    b_read = threading.Event()
    read = _reporter.rung_metrics

    def watched(study: optuna.Study, rungs: int, exclude: int = -1) -> List[List[float]]:
        found = read(study, rungs, exclude)
        who = "A" if exclude == 1 else "B"
        order.append(f"{who} read {sum(len(r) for r in found)}")
        if who == "B":
            b_read.set()
        else:
            b_read.wait(wait_s)  # B reads now, unless a lock holds it until A has written
        return found

    written = _reporter.SearchReporter.on_validation_end

    contexts = [_context(), _context()]
    reporters = [
        _reporter.SearchReporter(s, t, SETTINGS, BRACKET, context=c)
        for s, t, c in zip((first, second), (a_live, b_live), contexts)
    ]

    def report(reporter: Any, loss: float, who: str) -> Callable[[], None]:
        def run() -> None:
            written(reporter, {"loss": loss})
            order.append(f"{who} wrote")

        return run

    monkeypatch.setattr(_reporter, "rung_metrics", watched)
    a = threading.Thread(target=report(reporters[0], 1.0, "A"))
    a.start()
    a_read = threading.Event()
    while not order:  # A has read (or its thread ended: the asserts below say why)
        assert a.is_alive() or order, "reporter A ended before it read the rung"
        a_read.wait(0.01)
    b = threading.Thread(target=report(reporters[1], 2.0, "B"))
    b.start()
    a.join(60)
    b.join(60)
    return order, contexts[0], contexts[1]


@pytest.mark.parametrize("kind", ["postgresql", "journal"])
def test_a_second_decision_at_a_rung_waits_for_the_first(
    request: pytest.FixtureRequest,
    tmp_path: pathlib.Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storages = _storages(request, tmp_path, kind)
    assert _serial.kind(storages[0]) == kind
    order, a, b = _race(storages, 1.0, monkeypatch)
    # A read an empty rung and continues; B read A's result, ranks below it and stops, as a
    # serial replay (A, then B) decides. Without the lock B reads the rung empty while A
    # waits ("B read 0") and continues too.
    assert order[0] == "A read 0" and "B read 1" in order, order
    assert not a.stop and b.stop


def test_the_lock_is_held_only_inside_the_block_and_per_study(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """Two studies (brackets) decide at once; the same study's lock is free after the block
    (another storage takes it at once); on PostgreSQL the lock is an advisory lock the
    server shows while held."""
    url = request.getfixturevalue("postgres_url")
    storages = [open_storage(url, tmp_path) for _ in range(2)]
    try:
        one = optuna.create_study(study_name="bracket-0", storage=storages[0])
        other = optuna.create_study(study_name="bracket-1", storage=storages[1])
        again = optuna.load_study(study_name="bracket-0", storage=storages[1])
        done = threading.Event()
        with _serial.deciding(one):
            held = _advisory_locks(storages[1])
            assert held == [(_serial.NAMESPACE, one._study_id)], held

            def other_bracket() -> None:
                with _serial.deciding(other):
                    done.set()

            thread = threading.Thread(target=other_bracket)
            thread.start()
            assert done.wait(30), "a decision in another study waited for this one"
            thread.join()
        with _serial.deciding(again):  # released: the other storage takes it at once
            pass
        assert _advisory_locks(storages[0]) == []
    finally:
        for storage in storages:
            storage._backend.engine.dispose()


def _advisory_locks(storage: Any) -> List[Tuple[int, int]]:
    from sqlalchemy import text

    with storage._backend.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT classid::int, objid::int FROM pg_locks WHERE locktype = 'advisory' AND "
                "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        ).all()
    return [(int(a), int(b)) for a, b in rows]


def test_a_decision_holds_one_connection_for_its_lock_reads_and_writes(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """The lock, the rung's read and the result's write share the process's one connection
    (the budget stays one per process), opened once per decision (or the one the process had
    just used), and left to linger after it, the lock released."""
    url = request.getfixturevalue("postgres_url")
    server = request.getfixturevalue("postgres_server")
    storage = open_storage(url, tmp_path)
    try:
        study = optuna.create_study(study_name="bracket-0", storage=storage)
        trial = study.ask()
        storage._backend.engine.pool.linger = 3600.0  # still open when counted, however slow
        storage._backend.engine.pool.close_idle()  # the one that asking left open
        with ConnectionCounter(storage._backend.engine) as count, _serial.deciding(study):
            assert _advisory_locks(storage) == [(_serial.NAMESPACE, study._study_id)]
            _reporter.rung_metrics(study, 2)
            trial.set_user_attr("rungs", {"0": 1.0})
            trial.set_user_attr("rung", 0)
            assert server.connections(url.rsplit("/", 1)[1]) == 1
        assert count.opened == 1 and count.peak == 1, (count.opened, count.peak)
        assert server.connections(url.rsplit("/", 1)[1]) == 1  # lingering, for the next use
        assert _advisory_locks(storage) == []
    finally:
        storage._backend.engine.dispose()


def test_a_trial_created_late_never_takes_the_number_of_one_created_after_it(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """On a database a trial's id comes from a sequence when its creation starts, and the
    creation may commit after a trial with a higher id has numbered itself: unless numbering
    counts that trial, both take one number (seen once in the 16-worker scale drill, two
    trials writing to one trial-5 folder). Here trial A's id is drawn first and its row
    committed after B numbered itself. Numbering under the search's lock (``creating``:
    PostgreSQL's advisory lock, held meanwhile) gives A the next number; without it A took
    B's."""
    from sqlalchemy import text

    from det_lightning._runner._lease import TRIAL_NUMBER, number_new_trial

    url = request.getfixturevalue("postgres_url")
    storage = open_storage(url, tmp_path)
    try:
        study = optuna.create_study(study_name="search-bracket-0", storage=storage)
        first = study.ask()
        with _serial.creating(study, "search") as locked:
            assert locked and (_serial.NUMBERING, _crc_key("search")) in _advisory_locks(storage)
            assert number_new_trial(study, first, serialized=locked) == 1
        assert _advisory_locks(storage) == []
        engine = storage._backend.engine
        with engine.connect() as connection:  # A's creation starts: its id is drawn
            late_id = connection.execute(
                text("SELECT nextval(pg_get_serial_sequence('trials', 'trial_id'))")
            ).scalar_one()
            connection.commit()
        b = study.ask()  # B is created after A's id was drawn, and numbers itself first
        assert b._trial_id > late_id
        with _serial.creating(study, "search") as locked:
            assert number_new_trial(study, b, serialized=locked) == 2
        with engine.connect() as connection:  # A's creation commits now
            connection.execute(
                text(
                    "INSERT INTO trials (trial_id, number, study_id, state, datetime_start) "
                    "VALUES (:id, 99, :study, 'RUNNING', now())"
                ),
                {"id": late_id, "study": study._study_id},
            )
            connection.commit()
        a = optuna.Trial(study, late_id)
        assert number_new_trial(study, a) == 2  # the unserialized rule: B's number again
        with _serial.creating(study, "search") as locked:
            assert number_new_trial(study, a, serialized=locked) == 3
        numbers = [t.user_attrs[TRIAL_NUMBER] for t in study.get_trials(deepcopy=False)]
        assert sorted(numbers) == [1, 2, 3]
    finally:
        storage._backend.engine.dispose()


@pytest.mark.parametrize("kind", ["postgresql", "journal"])
def test_a_trial_never_numbered_takes_its_place_and_shares_it_with_its_continuation(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, kind: str
) -> None:
    """A worker killed right after asking for a trial, inside the lock, leaves it without a
    number (it shows its fallback, id + 1). The next worker to create a trial numbers it first,
    with the number it would have had, so numbers run 1..n with no gap (a database shared by
    many experiments gives ids far ahead of a search's numbers); the worker that takes it over
    finds it numbered, and it and its continuation share that number: the budget counts
    trials by number. (Before 2026-11-28 the continuation carried the fallback, which a trial
    asked for since could have taken: nine numbers went to two trials each in the 64-worker
    drill; then the fallback left a gap.) On a journal the lock is a file lock."""
    from det_lightning._runner._lease import take_over, trial_number
    from det_lightning._runner.search._asking import _admit, _ask, next_bracket

    storage = _storages(request, tmp_path, kind)[0]
    space = {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}}
    settings = SearchSettings.from_upfront(
        {"name": "random", "metric": "loss", "max_trials": 5, "max_length": {"batches": 4}},
        space,
    )
    other = optuna.create_study(study_name="other-bracket-0", storage=storage)
    for _ in range(3):  # another experiment's trials in the same database: ids run ahead
        other.ask()
    study = optuna.create_study(study_name="search-bracket-0", storage=storage)
    with _serial.creating(study, "search") as locked:
        assert locked
        orphan = study.ask()  # its worker is killed here, inside the lock
    assert trial_number(orphan) == orphan._trial_id + 1 > 1  # its fallback, shown meanwhile
    others = [_ask(study, settings, 0, space, seed=3) for _ in range(3)]
    assert [trial_number(t) for t in others if t is not None] == [2, 3, 4]
    frozen = study._storage.get_trial(orphan._trial_id)
    assert frozen.user_attrs[TRIAL_NUMBER] == 1  # numbered by the first worker after it
    continuation = take_over(study, frozen)
    assert continuation is not None
    assert trial_number(continuation) == 1  # one trial, one number
    assert _admit(study, settings, 0, continuation, space=space, seed=3) is not None
    assert next_bracket([study], settings) == 0  # 4 trials of 5 started: one more
    last = _ask(study, settings, 0, space, seed=3)
    assert last is not None and trial_number(last) == 5
    assert next_bracket([study], settings) is None  # the budget is spent


@pytest.mark.parametrize("kind", ["postgresql", "journal"])
def test_a_trial_never_numbered_and_taken_over_first_is_numbered_by_its_taker(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, kind: str
) -> None:
    """The orphan is taken over before any other trial is created: the taker numbers it
    under the lock, and the next trial follows it."""
    from det_lightning._runner._lease import take_over, trial_number
    from det_lightning._runner.search._asking import _ask

    storage = _storages(request, tmp_path, kind)[0]
    space = {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}}
    settings = SearchSettings.from_upfront(
        {"name": "random", "metric": "loss", "max_trials": 3, "max_length": {"batches": 4}},
        space,
    )
    study = optuna.create_study(study_name="search-bracket-0", storage=storage)
    first = _ask(study, settings, 0, space, seed=3)
    assert first is not None and trial_number(first) == 1
    with _serial.creating(study, "search"):
        orphan = study.ask()  # its worker is killed here, inside the lock
    continuation = take_over(study, study._storage.get_trial(orphan._trial_id))
    assert continuation is not None and trial_number(continuation) == 2
    last = _ask(study, settings, 0, space, seed=3)
    assert last is not None and trial_number(last) == 3


def _crc_key(search: str) -> int:
    import zlib

    key = zlib.crc32(search.encode())
    return key - (1 << 32) if key >= 1 << 31 else key
