"""The scale drill: many search workers on one PostgreSQL and a bucket, some killed mid-trial.

    python benchmarks/search.py --sections scale [--scale-workers 64] [--scale-trials 500]
        [--scale-kills 8]

One loopback PostgreSQL server (``tests/fixtures/postgres.py``, its default
``max_connections``) and one S3 endpoint (moto's server, as ``tests/fixtures/object_store.py``
runs it, here in a process of its own); ``scale_worker.py`` forks the workers from one warm
process, each a machine of its own, running det_lightning's search loop over ``adaptive_asha``
with stand-in trials (``scale_worker.stand_in_trial``: ~0.5 s, the real reporter, a real
checkpoint upload after each report). Once a tenth of the trials have started, the drill
SIGKILLs ``kills`` workers whose trial is running. Checks, each printed, any failing one
making the run fail:

- every trial of the budget ran and ended once: ``max_trials`` trial numbers, each with one
  ended record (not counting the records of trials taken over), none left running;
- no two trials share a number;
- every rung decision equals a serial replay of the same reports (``_asha.decide`` over the
  reports in the order they were decided: each inside its study's lock, ``_serial``; a
  decision a kill kept from being logged goes into the replay where its window allows,
  ``lost_decisions``);
- each killed worker's trial was taken over within ``--heartbeat-timeout`` plus one renewal
  interval of the kill;
- the connections the search held (``pg_stat_activity``, polled) stayed within its budget:
  one per worker and one per trial's process (``_pool``; a trial's rung lock is held on its
  one connection, ``_serial``), and within ``max_connections``;
- the storage's cost per trial: committed transactions (``pg_stat_database.xact_commit``) and
  connections opened (``pg_stat_database.sessions``) per trial.

``DET_LIGHTNING_DB_LINGER_S=0`` runs it with each connection closed as soon as it is used (the
pool before 2026-11-28), to compare.
"""

import contextlib
import dataclasses
import itertools
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

HERE = pathlib.Path(__file__).resolve().parent
HEARTBEAT_TIMEOUT_S = 8.0
# The drill's own reads of the search (which trials run, the final state) name themselves, so
# that the connection count leaves them out: the budget is the search's.
DRILL_APPLICATION = "det-lightning-scale-drill"
DRILL_ENGINE = {"connect_args": {"application_name": DRILL_APPLICATION}}
MAX_TIME = 16  # batches: rungs at 1, 4 and 16 (divisor 4)


def drill_config(trials: int) -> str:
    return (
        "name: scale-drill\nentrypoint: python3 train.py\n"
        "hyperparameters:\n  x: {type: double, minval: 0.0, maxval: 1.0}\n"
        "searcher:\n  name: adaptive_asha\n  metric: loss\n  smaller_is_better: true\n"
        f"  max_trials: {trials}\n  time_metric: batches\n  max_time: {MAX_TIME}\n"
        "  divisor: 4\n  mode: standard\n"
        "reproducibility:\n  experiment_seed: 7\n"
    )


@dataclasses.dataclass
class Servers:
    """The drill's PostgreSQL server (``server``, ``url``: its database) and S3 endpoint."""

    server: Any
    database: str
    url: str
    endpoint: str

    def query(self, statement: str, *args: Any) -> List[Tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.server.port, user="postgres", dbname="postgres",
            autocommit=True,
        ) as connection:  # fmt: skip
            return list(connection.execute(statement, args).fetchall())  # type: ignore[arg-type]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def s3_server(env: Dict[str, str]) -> Iterator[str]:
    """moto's S3 server on loopback in a process of its own; ``env`` gets its endpoint."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1",
         "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("moto's S3 server did not start")
            time.sleep(0.2)
        env.update(
            AWS_ENDPOINT_URL_S3=endpoint, AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
        )  # fmt: skip
        yield endpoint
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def servers(env: Dict[str, str]) -> Iterator[Servers]:
    """A PostgreSQL server with a new database, and an S3 endpoint with a bucket."""
    import s3fs

    sys.path.insert(0, str(HERE.parent))
    from tests.fixtures import postgres

    with postgres.server_in_tmp() as server:
        server.execute("CREATE DATABASE drill")
        with s3_server(env) as endpoint:
            s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing").mkdir("drill")
            yield Servers(server, "drill", server.url("drill"), endpoint)


MIN_AVAILABLE_MB = 2500  # below, the drill kills its workers: the machine is shared


def available_mb() -> int:
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 1 << 30


class ConnectionWatch:
    """Polls ``pg_stat_activity`` for the drill database's connections (their peak) and the
    machine's available memory (its low; below ``MIN_AVAILABLE_MB`` it kills ``pids``)."""

    def __init__(self, servers: Servers) -> None:
        self.servers, self.peak, self.polls = servers, 0, 0
        self.low_mb, self.pids, self.out_of_memory = available_mb(), [], False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ConnectionWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            rows = self.servers.query(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name <> %s",
                self.servers.database,
                DRILL_APPLICATION,
            )
            self.peak, self.polls = max(self.peak, int(rows[0][0])), self.polls + 1
            self.low_mb = min(self.low_mb, available_mb())
            if self.low_mb < MIN_AVAILABLE_MB and not self.out_of_memory:
                self.out_of_memory = True
                for pid in self.pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def commits(servers: Servers) -> int:
    return _database_stat(servers, "xact_commit")


def sessions(servers: Servers) -> int:
    """Connections opened to the drill's database so far (PostgreSQL >= 14)."""
    return _database_stat(servers, "sessions")


def _database_stat(servers: Servers, column: str) -> int:
    rows = servers.query(
        f"SELECT {column} FROM pg_stat_database WHERE datname = %s", servers.database
    )
    return int(rows[0][0])


def _running_leases(url: str) -> List[Tuple[int, int]]:
    """(trial id, worker pid) of each RUNNING trial whose lease a worker holds."""
    import optuna

    storage = optuna.storages.RDBStorage(
        url, engine_kwargs=DRILL_ENGINE, skip_compatibility_check=True
    )
    try:
        found = []
        for study in storage.get_all_studies():
            for trial in storage.get_all_trials(study._study_id, deepcopy=False):
                lease = trial.user_attrs.get("lease")
                if trial.state.name == "RUNNING" and lease and lease.get("renewed", 0) > 0:
                    found.append((trial._trial_id, int(lease["pid"])))
        return found
    finally:
        storage.engine.dispose()


def kill_workers(
    url: str,
    pids: List[int],
    kills: int,
    started: Callable[[], int],
    *,
    after: int,
    running: Callable[[], bool],
) -> List[Dict[str, Any]]:
    """SIGKILLs ``kills`` workers, each while its trial runs, once ``after`` trials started;
    returns each kill: the trial id, the worker's pid, the time. Fewer when the workers ended
    first (``running()`` false: every trial done, or failed; the run's checks say which)."""
    killed: List[Dict[str, Any]] = []
    while len(killed) < kills and running():
        if started() < after:
            time.sleep(0.2)
            continue
        done = {k["pid"] for k in killed}
        for trial_id, pid in _running_leases(url):
            if pid in pids and pid not in done and len(killed) < kills:
                os.kill(pid, signal.SIGKILL)
                killed.append({"trial_id": trial_id, "pid": pid, "at": time.time()})
                done.add(pid)
                break
        time.sleep(0.5)
    return killed


def run_workers(
    work: pathlib.Path, servers: Servers, env: Dict[str, str], *, workers: int, trials: int,
    kills: int,
) -> Dict[str, Any]:  # fmt: skip
    """The drill's run: its kills, its seconds, the peak connections and the commits."""
    (work / "project").mkdir()
    (work / "project" / "train.py").write_text("raise SystemExit('stand-in trials only')\n")
    (work / "exp.yaml").write_text(drill_config(trials))
    spec = {
        "workers": workers, "config": str(work / "exp.yaml"), "project": str(work / "project"),
        "checkpoints": "s3://drill/checkpoints", "storage": servers.url,
        "heartbeat_timeout": HEARTBEAT_TIMEOUT_S, "events": str(work / "events.jsonl"),
        "pids": str(work / "pids.json"), "cache": str(work / "cache"), "trial_seconds": 0.5,
    }  # fmt: skip
    (work / "spec.json").write_text(json.dumps(spec))
    before, opened_before, memory_before = commits(servers), sessions(servers), available_mb()
    start = time.perf_counter()
    log = open(work / "workers.log", "w")
    process = subprocess.Popen(
        [sys.executable, str(HERE / "scale_worker.py"), str(work / "spec.json")],
        # TensorBoard's HParams of each trial go to the drill's folder, not the caller's.
        env={**env, "OMP_NUM_THREADS": "1", "DET_LIGHTNING_TENSORBOARD_DIR": str(work / "tb")},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    with ConnectionWatch(servers) as watch:
        while not (work / "pids.json").exists() and process.poll() is None:
            time.sleep(0.2)
        pids = json.loads((work / "pids.json").read_text()) if process.poll() is None else []
        watch.pids = pids

        def started() -> int:
            path = work / "events.jsonl"
            return len({json.loads(line)["trial"] for line in path.read_text().splitlines()}) if (
                path.exists()) else 0  # fmt: skip

        killed = kill_workers(
            servers.url,
            pids,
            kills,
            started,
            after=max(trials // 10, 1),
            running=lambda: process.poll() is None,
        )
        status = process.wait()
    log.close()
    seconds = time.perf_counter() - start
    return {
        "status": status, "seconds": seconds, "killed": killed, "peak": watch.peak,
        "commits": commits(servers) - before, "log": work / "workers.log",
        "sessions": sessions(servers) - opened_before,
        "low_mb": watch.low_mb, "memory_before_mb": memory_before, "out_of_memory": watch.out_of_memory,
    }  # fmt: skip


def pool_costs(servers: Servers, operations: int = 200) -> Dict[str, float]:
    """Milliseconds per report-like operation (a user attribute written, the trial read back)
    through det_lightning's pool (a connection per operation) and through SQLAlchemy's
    ``QueuePool`` keeping one connection open."""
    import optuna
    from sqlalchemy import pool

    from det_lightning._runner.search._pool import OneConnectionPool, linger_seconds

    servers.server.execute("CREATE DATABASE costs")  # not the drill's: its trials are checked
    url = servers.server.url("costs")
    costs = {}
    lingers = {"one connection per operation (OneConnectionPool, linger 0)": 0.0}
    kinds = {
        "one connection per operation (OneConnectionPool, linger 0)": {
            "poolclass": OneConnectionPool,
        },
        f"OneConnectionPool, kept {linger_seconds():g} s after use (the default)": {
            "poolclass": OneConnectionPool, "pool_pre_ping": True,
        },
        # 1+1: with max_overflow=0 Optuna's RDBStorage cannot open (its schema check nests a
        # second checkout, which waits for the first forever).
        "one connection kept (QueuePool pool_size=1, max_overflow=1)": {
            "poolclass": pool.QueuePool, "pool_size": 1, "max_overflow": 1,
        },
    }  # fmt: skip
    for name, kwargs in kinds.items():
        storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        if name in lingers:
            storage.engine.pool.linger = lingers[name]  # type: ignore[attr-defined]
        study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], name)
        trial_id = storage.create_new_trial(study_id)
        start = time.perf_counter()
        for i in range(operations):
            storage.set_trial_user_attr(trial_id, "rungs", {"0": i})
            storage.get_trial(trial_id)
        costs[name] = (time.perf_counter() - start) * 1000 / operations
        storage.engine.dispose()
    return costs


# ----- checks --------------------------------------------------------------------------------


def final_trials(url: str) -> Dict[str, List[Any]]:
    """Every study's trials as the storage has them at the end."""
    import optuna

    storage = optuna.storages.RDBStorage(
        url, engine_kwargs=DRILL_ENGINE, skip_compatibility_check=True
    )
    try:
        return {
            study.study_name: storage.get_all_trials(study._study_id, deepcopy=False)
            for study in storage.get_all_studies()
        }
    finally:
        storage.engine.dispose()


def check_trials(studies: Dict[str, List[Any]], trials: int) -> List[Tuple[str, bool, str]]:
    """Each trial of the budget ended once; no number shared by two trials."""
    from det_lightning._runner._lease import is_superseded, origin, trial_number
    from det_lightning._runner.search._reporter import counted

    ended: Dict[int, int] = {}
    origins: Dict[int, set] = {}
    running = 0
    for name, study in studies.items():
        for t in study:
            if not counted(t) or is_superseded(t):
                continue
            number = trial_number(t)
            origins.setdefault(number, set()).add((name, origin(t)))
            running += t.state.name in ("RUNNING", "WAITING")
            ended[number] = ended.get(number, 0) + (t.state.name in ("COMPLETE", "PRUNED"))
    twice = sorted(n for n, count in ended.items() if count > 1)
    lost = sorted(n for n, count in ended.items() if count == 0)
    shared = sorted(n for n, places in origins.items() if len(places) > 1)
    return [
        (
            "no trial lost or run twice",
            len(ended) == trials and not twice and not lost and running == 0,
            f"{len(ended)} trial numbers of {trials}; ended twice: {twice[:10]}; never ended: "
            f"{lost[:10]}; still running: {running}",
        ),
        ("no duplicate trial numbers", not shared, f"numbers given to two trials: {shared[:10]}"),
    ] + [("(a trial never ended)", True, _history(studies, n)) for n in lost[:3]]


def _history(studies: Dict[str, List[Any]], number: int) -> str:
    """Every record of trial ``number``: what a failed check shows."""
    from det_lightning._runner._lease import trial_number

    keep = ("superseded", "continues", "stopped", "rung", "surplus", "lease")
    return "; ".join(
        f"id {t._trial_id} {t.state.name} start {t.datetime_start} end {t.datetime_complete} "
        f"{ {k: v for k, v in t.user_attrs.items() if k in keep} }"
        for study in studies.values()
        for t in study
        if trial_number(t) == number
    )


def lost_decisions(
    killed: List[Dict[str, Any]],
    studies: Dict[str, List[Any]],
    events: List[Dict[str, Any]],
    units: Dict[str, Tuple[int, ...]],
) -> List[Dict[str, Any]]:
    """The decisions a killed trial's process committed but never logged: a stand-in logs its
    report after the decision commits, so a kill between the two loses the line. Each is a rung
    the killed trial's record holds (``rungs``, as the kill left it) that none of its logged
    reports entered, decided after its last logged report and before the kill."""
    from det_lightning._runner._lease import trial_number

    records = {t._trial_id: (name, t) for name, study in studies.items() for t in study}
    lost = []
    for kill in killed:
        name, record = records[kill["trial_id"]]
        number = trial_number(record)
        mine = sorted(
            (e for e in events if e["trial"] == number and e["written"] < kill["at"]),
            key=lambda e: e["written"],
        )
        logged = {index for e in mine for index in e["entered"]}
        held = record.user_attrs.get("rungs") or {}
        for index in sorted((i for i in held if i not in logged), key=int):
            lost.append(
                {
                    "trial": number, "study": name, "batches": units[name][int(index)],
                    "value": held[index], "rung_before": mine[-1]["rung"] if mine else 0,
                    "after": mine[-1]["written"] if mine else 0.0, "before": kill["at"],
                }
            )  # fmt: skip
    return lost


def replay(
    events: List[Dict[str, Any]],
    units: Dict[str, Tuple[int, ...]],
    lost: Sequence[Dict[str, Any]] = (),
) -> List[str]:
    """The reports whose decision differs from a serial replay of all the reports, in the
    order they were written (each study on its own, as each bracket ranks its own trials).

    A decision lost to a kill (``lost_decisions``) goes into the replay, unchecked, at a
    place its window allows: the study counts as right if some such place makes every
    logged decision agree (else the place with the fewest differing is reported)."""
    wrong: List[str] = []
    for study in sorted({e["study"] for e in events}):
        logged = sorted((e for e in events if e["study"] == study), key=lambda e: e["written"])
        mine = [e for e in lost if e["study"] == study]
        places = [
            range(
                sum(e["written"] <= gone["after"] for e in logged),
                sum(e["written"] < gone["before"] for e in logged) + 1,
            )
            for gone in mine
        ]
        best: Optional[List[str]] = None
        for chosen in itertools.product(*places):
            order: List[Dict[str, Any]] = list(logged)
            for place, gone in sorted(zip(chosen, mine), key=lambda pair: -pair[0]):
                order.insert(place, gone)
            found = _replay_study(order, units[study])
            if best is None or len(found) < len(best):
                best = found
            if not best:
                break
        wrong += best or []
    return wrong


def _replay_study(order: List[Dict[str, Any]], units: Tuple[int, ...]) -> List[str]:
    """One study's reports decided one after another; the logged ones whose decision differs.
    A report's newly entered rungs are those its trial did not hold yet (a trial continued
    after a kill re-reports a rung its first run entered)."""
    from det_lightning._runner._asha import decide

    wrong = []
    rungs: Dict[int, Dict[int, float]] = {}
    for event in order:
        others = [
            [r[index] for number, r in rungs.items() if number != event["trial"] and index in r]
            for index in range(len(units))
        ]
        decision = decide(
            units, others, event["rung_before"], event["batches"],
            metric=event["value"], divisor=4.0,
        )  # fmt: skip
        held = rungs.setdefault(event["trial"], {})
        entered = sorted(str(index) for index, _ in decision.entered if index not in held)
        for index, value in decision.entered:
            held[index] = value
        if "entered" not in event:  # a decision lost to a kill: applied, not checked
            continue
        stopped = decision.stop and decision.rung < len(units) - 1
        if (entered, decision.rung, stopped) != (event["entered"], event["rung"], event["stop"]):
            wrong.append(
                f"trial {event['trial']} at {event['batches']} batches: recorded rung "
                f"{event['rung']} stop {event['stop']} entered {event['entered']}, replay rung "
                f"{decision.rung} stop {stopped} entered {entered}"
            )
    return wrong


def check_takeovers(
    killed: List[Dict[str, Any]], studies: Dict[str, List[Any]], kills: int
) -> Tuple[str, bool, str]:
    """Each killed worker's trial taken over within the lease's timeout plus one interval, and
    as many workers killed as asked (fewer: the workers ended before a trial could be)."""
    from det_lightning._runner._lease import CONTINUES, LeaseSettings, trial_number

    leases = LeaseSettings(HEARTBEAT_TIMEOUT_S)
    bound = leases.timeout + leases.interval
    trials = {t._trial_id: t for study in studies.values() for t in study}
    delays: List[float] = []
    late = ended = 0
    for kill in killed:
        continuation = next(
            (t for t in trials.values() if t.user_attrs.get(CONTINUES) == kill["trial_id"]), None
        )
        if continuation is None:
            ended += trials[kill["trial_id"]].state.name in ("COMPLETE", "PRUNED")
            late += trials[kill["trial_id"]].state.name not in ("COMPLETE", "PRUNED")
            continue
        delay = continuation.datetime_start.timestamp() - kill["at"]
        delays.append(delay)
        late += delay > bound
    shown = ", ".join(f"{d:.1f}" for d in sorted(delays))
    numbers = sorted(trial_number(trials[k["trial_id"]]) for k in killed)
    return (
        f"killed workers' trials taken over within {bound:.0f} s",
        not late and len(delays) + ended == len(killed) == kills,
        f"{len(killed)} of {kills} killed (trials {numbers}); {len(delays)} taken over after "
        f"[{shown}] s; {ended} had ended as the kill landed; {late} late or never",
    )


def scale_section(workers: int, trials: int, kills: int) -> Tuple[List[str], bool]:
    """Runs the drill; its report's lines, and whether every check passed."""
    from det_lightning._runner._asha import make_brackets
    from det_lightning._runner.search._pool import linger_seconds

    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="det-lightning-scale-") as tmp, servers(env) as srv:
        work = pathlib.Path(tmp)
        load = os.getloadavg()
        costs = pool_costs(srv)
        run = run_workers(work, srv, env, workers=workers, trials=trials, kills=kills)
        max_connections = int(srv.query("SHOW max_connections")[0][0])
        studies = final_trials(srv.url)
        events_path = work / "events.jsonl"
        events = [json.loads(line) for line in events_path.read_text().splitlines()]
        log_tail = run["log"].read_text()[-3000:]
        if os.environ.get("DET_LIGHTNING_SCALE_LOG"):  # the whole workers' log, for debugging
            shutil.copy(run["log"], os.environ["DET_LIGHTNING_SCALE_LOG"])
        kept = _keep(work, run["log"], studies, run["killed"])
    brackets = make_brackets(max_time=MAX_TIME, max_trials=trials, divisor=4.0, mode="standard")
    units = {name: brackets[int(name.rsplit("-", 1)[1])].rung_units for name in studies}
    lost = lost_decisions(run["killed"], studies, events, units)
    wrong = replay(events, units, lost)
    budget = 2 * workers  # a worker and its trial (the rung lock on the trial's: _serial)
    used = run["memory_before_mb"] - run["low_mb"]
    checks = [
        ("every worker ended well", run["status"] == 0, f"status {run['status']}"),
        (
            f"the machine kept {MIN_AVAILABLE_MB} MB available",
            not run["out_of_memory"],
            f"lowest {run['low_mb']} MB available, {run['memory_before_mb']} before: "
            f"~{used / workers:.0f} MB per worker with its trial",
        ),
    ]
    checks += check_trials(studies, trials)
    checks.append(
        (
            "every rung decision equals a serial replay",
            not wrong,
            f"{len(events)} reports, {len(wrong)} differ"
            + (f": {wrong[:5]}" if wrong else "")
            + (f"; {len(lost)} decided but not logged before a kill (replayed in their window)"),
        )
    )
    checks.append(check_takeovers(run["killed"], studies, kills))
    checks.append(
        (
            f"peak connections within the budget (2 x {workers} workers = {budget})",
            run["peak"] <= min(budget, max_connections),
            f"peak {run['peak']} (max_connections {max_connections})",
        )
    )
    per_trial, opened_per_trial = run["commits"] / trials, run["sessions"] / trials
    lines = [
        f"## Scale drill: {workers} workers, {trials} trials, {kills} killed",
        "",
        f"adaptive_asha (max_time {MAX_TIME} batches, divisor 4, standard brackets "
        f"{[b.rung_units for b in brackets]}), stand-in trials of ~0.5 s, heartbeat timeout "
        f"{HEARTBEAT_TIMEOUT_S:.0f} s; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"at the start; {run['seconds']:.0f} s wall; {per_trial:.1f} transactions per trial "
        f"({run['commits']} committed), {opened_per_trial:.1f} connections opened per trial "
        f"({run['sessions']}; connections kept {linger_seconds():g} s after use).",
        "",
        "| check | passed | what was found |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {'yes' if ok else '**NO**'} | {found} |" for name, ok, found in checks]
    lines += ["", "| pool (measured before the drill) | ms per report-like write + read |"]
    lines += ["|---|---|"] + [f"| {name} | {ms:.1f} |" for name, ms in costs.items()]
    passed = all(ok for _, ok, _ in checks)
    if not passed:
        lines += ["", f"The drill's events, trials and log are kept in {kept}.", ""]
        lines += ["Workers' log (its end):", "", "```", log_tail, "```"]
    else:
        shutil.rmtree(kept, ignore_errors=True)
    return lines, passed


def _keep(
    work: pathlib.Path, log: pathlib.Path, studies: Dict[str, List[Any]], killed: List[Any]
) -> pathlib.Path:
    """A copy of what a failed check is read from, outside the drill's folder (removed when
    the drill ends): the reports (``events.jsonl``), the workers' log, and every trial as the
    storage had it at the end with the kills (``trials.json``), for ``replay`` by hand."""
    kept = pathlib.Path(tempfile.mkdtemp(prefix="det-lightning-scale-kept-"))
    shutil.copy(work / "events.jsonl", kept / "events.jsonl")
    shutil.copy(log, kept / "workers.log")
    trials = {
        name: [
            {
                "id": t._trial_id,
                "state": t.state.name,
                "start": t.datetime_start.timestamp() if t.datetime_start else None,
                "user_attrs": t.user_attrs,
                "intermediate_values": t.intermediate_values,
            }
            for t in found
        ]
        for name, found in studies.items()
    }
    text = json.dumps({"studies": trials, "killed": killed}, default=str)
    (kept / "trials.json").write_text(text)
    return kept
