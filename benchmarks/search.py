"""What a search costs: ASHA against a sequential search, workers and storages, the storage's
cost per trial, a dead worker's takeover, and a trial's start-up.

    python benchmarks/search.py [--trials 12] [--max-time 32] [--quick] [--out benchmarks/results]

Every run is ``det-lightning experiment`` in a fresh directory on the project of
``search_project.py`` (the test fixture's ``RegressionTrial``, timed). Sections:

- **ASHA**: ``sequential`` (a random search of N trials, each trained to ``max_time`` batches,
  one after another) against ``adaptive_asha`` over N trials with 1 and 2 workers; the engine's
  cost per trial is the ASHA run's time beyond what its batches cost at the sequential run's
  time per batch, over N.
- **Workers and storages**: the random search with 1, 2 and 4 workers (``--workers``), on the
  journal file and on a PostgreSQL server started for the run (``tests/fixtures/postgres.py``;
  skipped, and said so, where none is installed: ``scripts/ensure-postgres.sh``).
- **Storage cost per trial**: the storage operations one trial of a search makes (ask, the
  attribute writes, three reports, a lease renewal, tell, and the reads between them), timed
  without training.
- **Takeover**: worker A holds its trial at batch 2 (checkpointed) and is killed with SIGKILL;
  worker B waits; the time from the kill to B's first batch of the resumed trial, with
  ``--heartbeat-timeout`` seconds of lease.
- **Start-up**: the time from one trial's end (its fit()'s last hook) to the next trial's first
  batch inside a worker, forked from the warm template and as a new interpreter
  (``DET_LIGHTNING_WARM_START=0``), for a model_def and a command trial.

Wall times on a shared machine vary; each ratio comes from one run, read it with care.
"""

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # tests.fixtures.postgres

from search_project import config, make_project  # noqa: E402

SEQUENTIAL = "sequential (random, full length)"
# How each ``det-lightning experiment`` process is started: ``subprocess.Popen``. The smoke test
# hands in its warm launcher (tests/fixtures/warm.py: the same process, forked from a server that
# has imported torch, Lightning and det_lightning); the start-up section's "new interpreter"
# rows still start their templates and trials as new interpreters (DET_LIGHTNING_WARM_START=0).
Popen: Callable[..., "subprocess.Popen[str]"] = subprocess.Popen
TAKEOVER_TIMEOUT_S = 4.0


def _env(work: pathlib.Path, **extra: str) -> Dict[str, str]:
    return dict(
        os.environ,
        OMP_NUM_THREADS="1",
        DET_LIGHTNING_CHECKPOINT_DIR=str(work / "ckpt"),
        BENCH_TIMES=str(work / "times.jsonl"),
        **extra,
    )


def _experiment(
    work: pathlib.Path, text: str, *extra: str, env: Optional[Dict[str, str]] = None
) -> "subprocess.Popen[str]":
    (work / "exp.yaml").write_text(text)
    return Popen(
        [
            sys.executable,
            "-m",
            "det_lightning",
            "experiment",
            *extra,
            str(work / "exp.yaml"),
            str(make_project(work / "project")),
        ],
        cwd=work,
        env=env or _env(work),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(process: "subprocess.Popen[str]") -> None:
    out = process.communicate()[0]
    if process.returncode != 0:
        raise RuntimeError(f"the search failed (status {process.returncode}):\n{out[-4000:]}")


def _batches(work: pathlib.Path) -> int:
    batches = 0
    for trial_dir in (work / "ckpt").glob("*/trial-*"):  # <experiment id>/trial-<n>
        steps = [
            json.loads((p / "metadata.json").read_text())["steps_completed"]
            for p in trial_dir.iterdir()
            if (p / "metadata.json").exists()
        ]
        batches += max(steps, default=0)
    return batches


def _events(work: pathlib.Path) -> List[Dict[str, Any]]:
    path = work / "times.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _search(text: str, *extra: str, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        start = time.perf_counter()
        _finish(_experiment(work, text, *extra, env=env and {**_env(work), **env}))
        return {
            "seconds": time.perf_counter() - start,
            "batches": _batches(work),
            "events": _events(work),
        }


# ----- sections ------------------------------------------------------------------------------


def asha_section(trials: int, max_time: int, workers: List[int]) -> List[str]:
    runs = {SEQUENTIAL: _search(config("random", trials, max_time))}
    for count in workers:
        runs[f"asha, {count} worker{'s' if count > 1 else ''}"] = _search(
            config("asha", trials, max_time), "--workers", str(count)
        )
    base = runs[SEQUENTIAL]
    per_batch = base["seconds"] / max(base["batches"], 1)
    lines = [
        "## adaptive_asha against a sequential search",
        "",
        "| run | wall s | batches trained | vs sequential | engine cost per trial, s |",
        "|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        engine = (run["seconds"] - run["batches"] * per_batch) / trials
        lines.append(
            f"| {name} | {run['seconds']:.1f} | {run['batches']} | "
            f"{run['seconds'] / base['seconds']:.2f} | "
            f"{'-' if run is base else f'{engine:.2f}'} |"
        )
    return lines


@contextlib.contextmanager
def postgres_databases() -> Iterator[Optional[Any]]:
    """A function giving a new database URL on a PostgreSQL server started for this run, or
    None when no server is installed."""
    from tests.fixtures import postgres

    try:
        postgres.bin_dir()
    except RuntimeError:
        yield None
        return
    root = pathlib.Path(tempfile.mkdtemp(prefix="det-lightning-bench-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(root, postgres.SERVER_USER, postgres.SERVER_USER)
    server = postgres.start_server(root)
    names = iter(range(1000))

    def database() -> str:
        name = f"bench_{next(names)}"
        server.execute(f"CREATE DATABASE {name}")
        return server.url(name)

    try:
        yield database
    finally:
        postgres.stop_server(root)
        shutil.rmtree(root, ignore_errors=True)


def workers_section(
    trials: int, max_time: int, workers: List[int], database: Any, *, quick: bool = False
) -> List[str]:
    lines = [
        "## Workers and storages",
        "",
        f"A random search of {trials} trials of {max_time} batches; each storage's 1-worker "
        "run is the same trials one after another.",
        "",
        "| storage | workers | wall s | vs 1 worker | trials per minute |",
        "|---|---|---|---|---|",
    ]
    storages: Dict[str, Any] = {"journal file": lambda: None}
    if database is not None and not quick:  # --quick: the journal only (CI's time)
        storages["PostgreSQL"] = database
    for storage, url in storages.items():
        base = None
        for count in workers:
            where = url()
            extra = ["--workers", str(count)] + (["--storage", where] if where else [])
            seconds = _search(config("random", trials, max_time), *extra)["seconds"]
            base = base or seconds
            lines.append(
                f"| {storage} | {count} | {seconds:.1f} | {seconds / base:.2f} | "
                f"{trials * 60 / seconds:.1f} |"
            )
    if quick:
        lines.append("| PostgreSQL | - | not measured with --quick | | |")
    elif database is None:
        lines.append(
            "| PostgreSQL | - | not measured: no server installed "
            "(scripts/ensure-postgres.sh) | | |"
        )
    return lines


def storage_cost(url: Any, trials: int) -> float:
    """Seconds of storage operations per trial, as a search's trial makes them (``url``: a
    database URL or a storage)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="cost", storage=url, load_if_exists=True)
    start = time.perf_counter()
    for _ in range(trials):
        study.get_trials(deepcopy=False)  # the worker's look for expired trials and a bracket
        trial = study.ask()
        study.get_trials(deepcopy=False)  # admitted()
        trial.suggest_float("learning_rate", 1e-3, 0.3, log=True)
        for name, value in (("hparams", {"lr": 0.1}), ("host", "h"), ("pid", 1)):
            trial.set_user_attr(name, value)
        trial.set_user_attr("lease", {"host": "h", "pid": 1, "token": "t", "renewed": 0.0})
        for step in (2, 4, 8):  # a validation at each rung
            study.get_trials(deepcopy=False)  # the other trials' rung metrics
            trial.set_user_attr("rungs", {"0": 1.0})
            trial.set_user_attr("rung", 0)
            trial.report(1.0 / step, step=step)
        trial.set_user_attr("checkpoint", "/x")
        study.get_trials(deepcopy=False)
        trial.set_user_attr("batches", 8)
        study.tell(trial, 0.5)
    return (time.perf_counter() - start) / trials


def storage_section(trials: int, database: Any) -> List[str]:
    lines = [
        "## Storage cost per trial",
        "",
        "The storage operations one trial of a search makes (2 reads to pick and admit it, "
        "4 attribute writes, a lease, 3 validations each with a read and 3 writes, 3 at "
        f"the end, tell), timed without training over {trials} trials in one study.",
        "",
        "| storage | ms per trial |",
        "|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        journal = JournalStorage(JournalFileBackend(str(pathlib.Path(tmp) / "cost.journal")))
        lines.append(f"| journal file | {storage_cost(journal, trials) * 1000:.1f} |")
    if database is not None:
        from optuna.storages import RDBStorage

        storage = RDBStorage(database())
        try:
            lines.append(f"| PostgreSQL | {storage_cost(storage, trials) * 1000:.1f} |")
        finally:  # its connections closed, not left to the garbage collector
            storage.remove_session()
            storage.engine.dispose()
    return lines


def _watch(
    process: "subprocess.Popen[str]", wanted: List[str]
) -> Tuple[Dict[str, float], threading.Thread]:
    """Reads the process's output in a thread, which closes it at its end; the time each
    ``wanted`` text first appears."""
    seen: Dict[str, float] = {}

    def read() -> None:
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                for text in wanted:
                    if text in line and text not in seen:
                        seen[text] = time.time()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return seen, reader


def takeover_seconds() -> Dict[str, float]:
    """Worker A is killed while it holds a trial; the seconds until worker B takes it over
    and until it trains it."""
    started, resumed = "('bench'): ", "resumed from its latest checkpoint"
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        marker = work / "held"
        text = config("random", 1, 8, checkpoint_every=2)
        timeout = ["--heartbeat-timeout", str(TAKEOVER_TIMEOUT_S)]
        doomed = _experiment(
            work,
            text,
            *timeout,
            env=_env(work, BENCH_HOLD_MARKER=str(marker), DET_LIGHTNING_HOST_ID="machine-a"),
        )
        while not marker.exists():
            if doomed.poll() is not None:
                raise RuntimeError(f"worker A ended first:\n{doomed.communicate()[0][-4000:]}")
            time.sleep(0.05)
        survivor = _experiment(
            work, text, *timeout, env=_env(work, DET_LIGHTNING_HOST_ID="machine-b")
        )
        seen, reader = _watch(survivor, [started, resumed])
        deadline = time.monotonic() + 120
        while started not in seen and survivor.poll() is None:
            if time.monotonic() > deadline:  # its first line changed: fail, never hang
                os.killpg(doomed.pid, signal.SIGKILL)
                os.killpg(survivor.pid, signal.SIGKILL)
                raise RuntimeError(f"worker B never printed {started!r} within 120 s")
            time.sleep(0.05)  # B runs its search loop: it waits for A's trial
        killed = time.time()
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.communicate()
        survivor.wait()
        reader.join(60)  # every line read: B's, and its trials' (the pipe's last writers)
        if survivor.returncode != 0 or resumed not in seen:
            raise RuntimeError(f"worker B did not resume the trial (status {survivor.returncode})")
        first = [e for e in _events(work) if e["event"] == "first_batch" and e["batch"]]
        return {"takeover": seen[resumed] - killed, "first batch": first[0]["time"] - killed}


def takeover_section() -> List[str]:
    seconds = takeover_seconds()
    return [
        "## Takeover after a worker's death",
        "",
        "Worker A (machine-a) holds its trial at batch 2, checkpointed; once worker B "
        "(machine-b) runs its search loop, A is killed with SIGKILL. B finds the trial's "
        f"lease expired after `--heartbeat-timeout {TAKEOVER_TIMEOUT_S:g}` (it looks every "
        f"{TAKEOVER_TIMEOUT_S / 4:g} s), takes it over and resumes it from that checkpoint "
        "(B's first trial: its process is forked from a template still importing).",
        "",
        "| lease timeout, s | kill to takeover, s | kill to B's first batch of it, s |",
        "|---|---|---|",
        f"| {TAKEOVER_TIMEOUT_S:g} | {seconds['takeover']:.1f} | {seconds['first batch']:.1f} |",
    ]


def gaps(events: List[Dict[str, Any]]) -> List[float]:
    """Seconds from each trial's end to the next trial's first batch (one worker).

    >>> gaps([{"event": "first_batch", "time": 1.0}, {"event": "end", "time": 2.0},
    ...       {"event": "first_batch", "time": 2.5}, {"event": "end", "time": 3.0}])
    [0.5]
    """
    ends = [e["time"] for e in events if e["event"] == "end"]
    firsts = [e["time"] for e in events if e["event"] == "first_batch"]
    return [first - end for end, first in zip(ends, firsts[1:])]


def startup_section(trials: int) -> List[str]:
    lines = [
        "## Trial start-up",
        "",
        f"A random search of {trials} trials of 4 batches in one worker: from one trial's "
        "end (fit()'s last hook) to the next trial's first batch.",
        "",
        "| trial | start | median s | max s |",
        "|---|---|---|---|",
    ]
    for kind, entrypoint in (
        ("model_def", "timed_def:TimedTrial"),
        ("command", "python3 timed_train.py"),
    ):
        for start, warm in (("forked from the warm template", "1"), ("new interpreter", "0")):
            run = _search(
                config("random", trials, 4, entrypoint=entrypoint),
                env={"DET_LIGHTNING_WARM_START": warm},
            )
            found = gaps(run["events"])
            lines.append(
                f"| {kind} | {start} | {statistics.median(found):.2f} | {max(found):.2f} |"
            )
    return lines


SECTIONS = ("asha", "workers", "storage", "takeover", "startup")
EXTRA_SECTIONS = ("scale",)  # not in the default run (nor in CI): --sections scale


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--max-time", type=int, default=32)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 trials of 4 batches, ASHA on 1 worker, 2 workers on the journal file, "
        "2 trials per start-up row: checks that it all runs (the CI smoke test)",
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help="comma-separated subset of " + ",".join(SECTIONS) + " (default: all)",
    )
    parser.add_argument("--scale-workers", type=int, default=64)
    parser.add_argument("--scale-trials", type=int, default=500)
    parser.add_argument("--scale-kills", type=int, default=8)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    unknown = sorted(set(sections) - set(SECTIONS) - set(EXTRA_SECTIONS))
    if unknown:
        parser.error(
            f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS + EXTRA_SECTIONS)}"
        )
    trials, max_time = (3, 4) if args.quick else (args.trials, args.max_time)
    workers = [2] if args.quick else [1, 2, 4]
    command = "python benchmarks/search.py " + (
        "--quick" if args.quick else f"--trials {trials} --max-time {max_time}"
    )
    if sections != list(SECTIONS):
        command += f" --sections {','.join(sections)}"
    if "scale" in sections:
        command += (
            f" --scale-workers {args.scale_workers} --scale-trials {args.scale_trials}"
            f" --scale-kills {args.scale_kills}"
        )
    lines = [
        f"# Searches: {trials} trials, max_time {max_time} batches",
        "",
        f"Command: `{command}`, {datetime.date.today()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the start.",
        "",
    ]
    if "asha" in sections:  # --quick: ASHA with one worker (the workers section runs two)
        lines += asha_section(trials, max_time, [1] if args.quick else [1, 2]) + [""]
    if "workers" in sections or "storage" in sections:
        with postgres_databases() as database:
            if "workers" in sections:
                lines += workers_section(trials, max_time, workers, database, quick=args.quick)
                lines += [""]
            if "storage" in sections:
                lines += storage_section(20 if args.quick else 200, database) + [""]
    if "takeover" in sections:
        lines += takeover_section() + [""]
    if "startup" in sections:
        lines += startup_section(2 if args.quick else 6)  # 2 trials: one gap to time
    passed = True
    if "scale" in sections:
        from search_scale import scale_section

        scale, passed = scale_section(args.scale_workers, args.scale_trials, args.scale_kills)
        lines += scale
    text = "\n".join(lines).rstrip("\n") + "\n"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    theme = "search" + ("-quick" if args.quick else "")
    if sections != list(SECTIONS):
        theme += "-" + "-".join(sections)
    name = f"{theme}_cpu-{os.cpu_count()}core_{datetime.date.today()}"
    (out / f"{name}.md").write_text(text)
    print(text)
    if not passed:
        raise SystemExit("the scale drill failed a check (see the table above)")


if __name__ == "__main__":
    main()
