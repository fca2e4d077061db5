"""Searches on a real PostgreSQL server (``--storage postgresql+psycopg://...``), as several
machines share one: the server is started by the tests (``tests/fixtures/postgres.py``), each
test gets a new database."""

import gc
import os
import pathlib
import re
import threading
import time
from typing import Any, List, Tuple

import optuna
import pytest

from det_lightning._runner.search import _pool
from det_lightning._runner.search._storage import open_storage
from tests.fixtures.postgres import ConnectionCounter, PostgresServer, server_in_tmp
from tests.integration.cli_support import (
    PROJECT,
    VALIDATION_LOG_ENV,
    output,
    read_validation_log,
    run_cli,
)
from tests.integration.search_support import (
    GRID,
    GRID_ORDER,
    barrier,
    check_search,
    eventually,
    experiment_of,
    grid_points,
    number_of,
    read_trials,
    slow_grid_config,
    slow_project,  # noqa: F401 (a fixture)
    start_and_kill_at_batch,
    start_search,
)

pytestmark = pytest.mark.slow

COMPLETE = optuna.trial.TrialState.COMPLETE


def test_workers_opening_a_new_database_at_once_all_get_the_storage(
    postgres_url: str, tmp_path: pathlib.Path
) -> None:
    """Several workers starting together on an empty database all create Optuna's tables;
    PostgreSQL fails all but the first ("type studydirection already exists"), and each opens
    the database again instead of ending."""
    workers = 8
    together = threading.Barrier(workers)
    opened: List[Any] = []
    failures: List[BaseException] = []

    def worker() -> None:
        together.wait()
        try:
            opened.append(open_storage(postgres_url, tmp_path))
        except BaseException as error:  # reported by the test, not lost in the thread
            failures.append(error)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not failures, failures
        assert len(opened) == workers
        opened[0].create_new_study([optuna.study.StudyDirection.MINIMIZE], "one")
        assert [s.study_name for s in opened[-1].get_all_studies()] == ["one"]
    finally:
        for storage in opened:  # closes their pooled connections now, not in the GC
            storage._backend.engine.dispose()


def _storage_and_trial(url: str, tmp: pathlib.Path, linger: float) -> Tuple[Any, int]:
    """A storage whose pool keeps a connection ``linger`` seconds, a trial in it, and no
    connection open."""
    storage = open_storage(url, tmp)
    storage._backend.engine.pool.linger = linger
    trial_id = optuna.create_study(study_name="s", storage=storage).ask()._trial_id
    storage._backend.engine.pool.close_idle()  # what opening and asking left open
    return storage, trial_id


def _write_from_two_threads(storage: Any, trial_id: int, writes: int) -> None:
    """A worker's two threads (its loop and its lease keeper) writing at once."""
    together = threading.Barrier(2)

    def write(key: str) -> None:
        together.wait()
        for i in range(writes):
            storage.set_trial_user_attr(trial_id, key, i)

    threads = [threading.Thread(target=write, args=(key,)) for key in ("loop", "lease")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_a_process_holds_one_connection_kept_a_moment_after_use(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: pathlib.Path
) -> None:
    """A worker's two threads writing at once hold one connection between them, and reuse it
    while it lingers after each use: 40 writes, one connection opened (before 2026-11-28: 40).
    Once the linger passes it closes by itself: idle, the process holds none
    (pg_stat_activity)."""
    database = postgres_url.rsplit("/", 1)[1]
    storage, trial_id = _storage_and_trial(postgres_url, tmp_path, linger=3600.0)
    with ConnectionCounter(storage._backend.engine) as count:
        _write_from_two_threads(storage, trial_id, 20)
        assert count.peak == 1 and count.opened == 1 and count.live == 1
        assert postgres_server.connections(database) == 1
        storage._backend.engine.pool.linger = 0.2  # the next use starts a short linger
        assert storage.get_trial(trial_id).user_attrs["lease"] == 19
        eventually(
            lambda: postgres_server.connections(database) == 0, "the idle connection's close"
        )
        assert count.live == 0 and count.opened == 1


def test_with_no_linger_a_connection_is_closed_as_soon_as_it_is_used(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: pathlib.Path
) -> None:
    """``DET_LIGHTNING_DB_LINGER_S=0``: the pool before 2026-11-28, a connection per
    operation, closed at once; still one at a time."""
    storage, trial_id = _storage_and_trial(postgres_url, tmp_path, linger=0.0)
    with ConnectionCounter(storage._backend.engine) as count:
        _write_from_two_threads(storage, trial_id, 5)
    assert count.peak == 1 and count.opened == 10 and count.live == 0
    assert postgres_server.connections(postgres_url.rsplit("/", 1)[1]) == 0


def test_a_forked_child_never_ends_its_parents_connection(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: pathlib.Path
) -> None:
    """A child forked while the parent's connection lingers (a DataLoader's worker forked by a
    trial between two reports) closes its pools as a process does at exit: the parent's
    session lives on, and the parent's next operation reuses it. Without the pool forgetting
    the connection in the child, the child's close at exit ends the parent's session; without
    the child's socket pointed at /dev/null, so does closing the child's copy of it (what a
    driver that closes connections it garbage-collects does). The parent's next operation
    would then open a new connection."""
    from det_lightning._runner.search._pool import close_idle_connections

    storage, trial_id = _storage_and_trial(postgres_url, tmp_path, linger=3600.0)
    with ConnectionCounter(storage._backend.engine) as count:
        storage.set_trial_user_attr(trial_id, "rungs", 1)
        child = os.fork()
        if child == 0:  # pragma: no cover (the child's own coverage is not collected)
            status = 0
            try:
                close_idle_connections()  # as the child's exit does
                for record in _pool._FORGOTTEN:  # as a driver closing what it collects does
                    record.dbapi_connection.close()  # (psycopg 3 checks the pid; not all do)
                _pool._FORGOTTEN.clear()
                gc.collect()
            except BaseException:
                status = 1
            os._exit(status)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        storage.set_trial_user_attr(trial_id, "rungs", 2)
        assert storage.get_trial(trial_id).user_attrs["rungs"] == 2
        assert count.opened == 1
    assert postgres_server.connections(postgres_url.rsplit("/", 1)[1]) == 1
    storage._backend.engine.dispose()  # closes it now
    assert postgres_server.connections(postgres_url.rsplit("/", 1)[1]) == 0


def _take_every_slot(server: PostgresServer, database: str, slots: int) -> List[Any]:
    """``slots`` open connections to ``database``. A connection just closed (the fixture's
    ``CREATE DATABASE``) keeps its slot until its server process has exited, which on a busy
    machine comes after the next connect: a refusal for the limit is tried again meanwhile."""
    import psycopg

    held: List[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(held) < slots:
            try:
                held.append(
                    psycopg.connect(
                        host="127.0.0.1", port=server.port, user="postgres", dbname=database
                    )
                )
            except psycopg.OperationalError as e:
                if not _pool.at_limit(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    except BaseException:
        for connection in held:
            connection.close()
        raise
    return held


def test_a_server_at_its_connection_limit_stops_the_search_with_the_fixes_named(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL refuses a connection past max_connections ("sorry, too many clients
    already"): the storage tries again for a while, then stops with what to do; the command
    says so in one message, not a driver's traceback."""

    from det_lightning._runner import cli

    monkeypatch.setattr(_pool, "LIMIT_WAIT_S", 0.5)
    monkeypatch.chdir(tmp_path)
    with server_in_tmp("-c max_connections=2 -c superuser_reserved_connections=0") as server:
        server.execute("CREATE DATABASE full_db")
        held = _take_every_slot(server, "full_db", 2)
        try:
            with pytest.raises(_pool.ConnectionLimitReached) as refused:
                open_storage(server.url("full_db"), tmp_path)
            url = server.url("full_db")
            # A command entrypoint: the storage is opened before any trial would start, and
            # this test's process may have imported the real determined (compat.install()).
            config = tmp_path / "grid.yaml"
            text = pathlib.Path(GRID).read_text()
            config.write_text(re.sub(r"(?m)^entrypoint:.*$", "entrypoint: python3 no.py", text))
            assert "python3 no.py" in config.read_text()
            assert cli.main(["experiment", "--storage", url, str(config), str(PROJECT)]) == 1
        finally:
            for connection in held:
                connection.close()
        message = str(refused.value)
        assert "too many clients" in message and "2*N connections" in message
        for fix in ("max_connections", "PgBouncer in transaction mode", "gRPC storage proxy"):
            assert fix in message
        said = capsys.readouterr().err
        assert "PgBouncer" in said and "Traceback" not in said, said
        # Below the limit again, once the closed connections' server processes have exited:
        # it opens (given the time that takes on a busy machine).
        monkeypatch.setattr(_pool, "LIMIT_WAIT_S", 60.0)
        open_storage(server.url("full_db"), tmp_path)


def test_a_grid_search_on_postgresql_runs_each_point_once_and_reruns_as_done(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, postgres_url: str
) -> None:
    log = isolated_run / "validations.jsonl"
    command = ("experiment", "--storage", postgres_url, GRID, str(PROJECT))
    result = run_cli(*command, cwd=isolated_run, env={VALIDATION_LOG_ENV: str(log)})
    assert result.returncode == 0, output(result)
    trials = read_trials(postgres_url, checkpoint_dir)
    assert grid_points(trials) == GRID_ORDER
    assert all(t.state == COMPLETE for t in trials)
    assert [v["batches"] for v in read_validation_log(log)] == [4, 8] * 4
    for trial in trials:
        assert (experiment_of(checkpoint_dir) / f"trial-{number_of(trial)}").is_dir()

    again = run_cli(*command, cwd=isolated_run, env={VALIDATION_LOG_ENV: str(log)})
    assert again.returncode == 0, output(again)
    assert len(read_trials(postgres_url, checkpoint_dir)) == 4
    assert len(read_validation_log(log)) == 8  # finished: nothing trained again
    assert again.stdout.count(" COMPLETED ") == 4, output(again)


def test_two_workers_share_an_adaptive_asha_search_on_postgresql(
    isolated_run: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    slow_project: pathlib.Path,
    postgres_url: str,
) -> None:
    """Two worker processes, one database: each trial runs once, in one worker, to the rung
    Determined's rule stops it at; both workers train (each one's first trial waits for the
    other's)."""
    _two_workers(isolated_run, slow_project, postgres_url)
    trials = read_trials(postgres_url, checkpoint_dir)
    check_search(checkpoint_dir, trials, replay=False)
    assert len({t.user_attrs["pid"] for t in trials}) == 2


def _two_workers(workdir: pathlib.Path, project: pathlib.Path, url: str) -> None:
    """Two ``det-lightning experiment --storage URL`` processes (as on two machines), each
    one's first trial waiting for the other's; both must succeed."""
    env = barrier(workdir, 2)
    workers = [start_search(workdir, project, "--storage", url, env=env) for _ in range(2)]
    outputs = [w.communicate(timeout=400)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n\n".join(outputs)


def test_two_workers_share_a_grid_search_on_postgresql_each_point_once(
    isolated_run: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    slow_project: pathlib.Path,
    postgres_url: str,
) -> None:
    """Both workers enqueue the grid's points into the new database at once; each point is
    trained once, and a point enqueued twice is dropped unrun."""
    slow_grid_config(slow_project)
    _two_workers(isolated_run, slow_project, postgres_url)
    trials = read_trials(postgres_url, checkpoint_dir)
    assert sorted(grid_points(trials)) == sorted(GRID_ORDER)
    assert sorted(t.user_attrs["grid_point"] for t in trials) == [0, 1, 2, 3]
    assert all(t.state == COMPLETE for t in trials)
    assert len({t.user_attrs["pid"] for t in trials}) == 2


def test_a_search_on_postgresql_killed_mid_trial_resumes_it_from_its_checkpoint(
    isolated_run: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    slow_project: pathlib.Path,
    postgres_url: str,
) -> None:
    """SIGKILL while the first trial trains past its second rung; the rerun on the same
    database takes that trial over from its checkpoint and finishes the search."""
    start_and_kill_at_batch(isolated_run, slow_project, 4, "--storage", postgres_url)
    running = [
        t
        for t in read_trials(postgres_url, checkpoint_dir)
        if t.state == optuna.trial.TrialState.RUNNING
    ]
    assert len(running) == 1, "not killed inside a trial"
    number = number_of(running[0])
    rerun = start_search(isolated_run, slow_project, "--storage", postgres_url)
    out = rerun.communicate(timeout=400)[0]
    assert rerun.returncode == 0, out
    assert f"trial {number} (bracket 0, rungs at [2, 4, 8] batches) resumed" in out, out
    assert "resuming from" in out
    check_search(checkpoint_dir, read_trials(postgres_url, checkpoint_dir))


def test_workers_reach_the_database_through_optunas_grpc_proxy(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: pathlib.Path
) -> None:
    """``--storage grpc://HOST:PORT``: the proxy holds the database's connections, the
    workers none."""
    import warnings

    from optuna.storages._grpc.server import make_server

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        server = make_server(open_storage(postgres_url, tmp_path), "127.0.0.1", 0)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        storage = open_storage(f"grpc://127.0.0.1:{port}", tmp_path)
        study = optuna.create_study(study_name="proxied", storage=storage)
        study.tell(study.ask(), 0.5)
        assert [
            t.value for t in open_storage(postgres_url, tmp_path).get_all_trials(study._study_id)
        ] == [0.5]
        database = postgres_url.rsplit("/", 1)[1]  # idle, after the linger: none open
        eventually(lambda: postgres_server.connections(database) == 0, "the connections' close")
    finally:
        server.stop(None)


@pytest.mark.parametrize("kind", ["journal", "postgres"])
def test_deleting_an_experiment_deletes_its_studies_only(
    kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """``Experiment.delete()``'s part in a search storage shared by many experiments: its
    brackets' studies go; another experiment's stay, also one whose name begins with its id."""
    from det_lightning._runner.search._storage import delete_studies

    url = request.getfixturevalue("postgres_url") if kind == "postgres" else str(tmp_path / "j.log")
    storage = open_storage(url)
    mine = "mnist-3f2a9c01de"
    others = ["mnist-3f2a9c01df-bracket-0", f"{mine}-bracket-0-aaaaaaaaaa-bracket-0"]
    for name in [f"{mine}-bracket-0", f"{mine}-bracket-1", *others]:
        optuna.create_study(study_name=name, storage=storage).enqueue_trial({"x": 1})
    assert sorted(delete_studies(url, mine)) == [f"{mine}-bracket-0", f"{mine}-bracket-1"]
    left = open_storage(url).get_all_studies()
    assert sorted(s.study_name for s in left) == sorted(others)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_reading_a_database_makes_no_table_and_no_file(
    kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """The client, ``experiment list`` and ``describe`` read an experiment's trials from its
    ``--storage`` database (``read_studies``): in a database where no search began they find
    none and create nothing (Optuna's storage makes its tables when opened; a SQLite URL makes
    its file); where one did, they read its studies."""
    import sqlalchemy

    from det_lightning._runner.search._storage import read_studies
    from det_lightning.pytorch._local_store import LocalStore

    sqlite_file = tmp_path / "search.db"
    url = (
        request.getfixturevalue("postgres_url")
        if kind == "postgres"
        else f"sqlite:///{sqlite_file}"
    )
    store = LocalStore(tmp_path / "checkpoints")
    mine = "mnist-3f2a9c01de"
    assert read_studies(url, store, mine) == []
    assert not sqlite_file.exists()
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        assert sqlalchemy.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()

    storage = open_storage(url)
    for name in [f"{mine}-bracket-0", "mnist-3f2a9c01df-bracket-0"]:
        optuna.create_study(study_name=name, storage=storage).enqueue_trial({"x": 1})
    (study,) = read_studies(url, store, mine)
    assert study.study_name == f"{mine}-bracket-0" and len(study.trials) == 1
