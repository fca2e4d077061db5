"""How much det_lightning costs next to what a user would otherwise run: one command.

    python benchmarks/run.py            # full run, several minutes; writes benchmarks/results/
    python benchmarks/run.py --quick    # a few steps per workload (the CI smoke test)
    python benchmarks/run.py --device cuda   # on a CUDA device (scripts/gpu-check.sh runs it)

Every (repetition, workload, system) runs in its own fresh process (``worker.py``), on one
thread, one at a time; the systems are interleaved within each repetition, so slow drift of the
machine hits all of them alike. The first repetition is a warm-up and is dropped (when there is
more than one, and unless ``--no-warm-up`` says a run just before warmed the machine). The
command reports; it never fails because a ratio is high.
"""

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cuda_tables  # noqa: E402
import workloads  # noqa: E402
from report import Report, Runs  # noqa: E402

ALL_SYSTEMS = [
    "raw",
    "raw-best",
    "lightning",
    "det_lightning",
    "det_lightning+tb",
    "det_lightning+sync",
    "determined",
    "determined+tb",
]


# Where raw-best (raw_loop.py's careful loop) runs: the single-process step workloads.
RAW_BEST_WORKLOADS = ("mlp", "cnn", "validation", "amp")


def systems_for(name: str, have_determined: bool) -> List[str]:
    systems = ["raw", "lightning", "det_lightning"]
    if name in RAW_BEST_WORKLOADS:
        systems.insert(1, "raw-best")
    if name == "mlp":
        systems.append("det_lightning+tb")
    if name == "checkpoint":  # the same saves written in the training thread
        systems.append("det_lightning+sync")
    if have_determined:
        systems.append("determined")
        if name == "mlp":  # TensorBoard on, as Determined's examples run (its default)
            systems.append("determined+tb")
    return systems


def _env(scratch: pathlib.Path, system: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        DET_LIGHTNING_CHECKPOINT_DIR=str(scratch / "checkpoints"),
        DET_LIGHTNING_TENSORBOARD_DIR=str(scratch / "tensorboard"),
        XDG_DATA_HOME=str(scratch / "determined-storage"),
    )
    if system.startswith("determined"):
        # Under torch >= 2.6 the real Determined cannot read its own checkpoints otherwise.
        env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
        # What Determined's own launcher sets for torch.distributed training.
        env["USE_TORCH_DISTRIBUTED"] = "1"
    return env


# How a worker process is started: ``subprocess.run``. The smoke tests hand in their warm
# launcher (tests/fixtures/warm.py: the same process, forked from a server that has imported
# torch) where only the workloads running matters; the import measurement always gets a new
# interpreter, since a fresh import is what it measures.
launch: Callable[..., "subprocess.CompletedProcess[bytes]"] = subprocess.run


def run_job(
    system: str, ws: List[Any], quick: bool, timeout: float
) -> Tuple[Optional[Dict[str, Dict[str, Any]]], str]:
    """Runs one worker process for ``ws`` (all with the same process count and device);
    returns ({workload: result}, "") or (None, why it failed)."""
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="det-lightning-bench-"))
    out = scratch / "result.json"
    cmd = [sys.executable]
    if ws[0].processes > 1:
        cmd += [
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={ws[0].processes}",
        ]
    cmd += [
        str(HERE / "worker.py"),
        system,
        ",".join(w.name for w in ws),
        str(out),
        "--scratch",
        str(scratch),
    ]
    if quick:
        cmd.append("--quick")
    if ws[0].device != "cpu":
        cmd += ["--device", ws[0].device]
    log = scratch / "log.txt"
    try:
        with open(log, "wb") as f:
            started = time.time()
            proc = (subprocess.run if system == "import" else launch)(
                cmd,
                env=_env(scratch, system),
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                cwd=scratch,
            )
        if proc.returncode != 0 or not out.exists():
            return None, _why(log, proc.returncode)
        output = json.loads(out.read_text())
        results = output["results"]
        for result in results.values():
            result["maxrss_mb"] = output["maxrss_mb"]
        if "startup" in results and ws[0].name == "startup":
            results["startup"]["startup_s"] = results["startup"]["first_done_wall"] - started
        return results, ""
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


INSTRUCTION_WORKLOADS = ("mlp", "validation")
CACHE_WORKLOADS = ("mlp",)

# What --cache reports per step, from callgrind's simulated caches and branch predictor (event
# names as callgrind writes them): a first-level miss costs ~10 cycles, a last-level one ~100-200,
# a mispredicted branch ~15-20, which instruction counts do not show.
CACHE_EVENTS: Dict[str, Tuple[str, ...]] = {
    "instructions_per_step": ("Ir",),
    "i1_misses_per_step": ("I1mr",),
    "d1_misses_per_step": ("D1mr", "D1mw"),
    "ll_misses_per_step": ("ILmr", "DLmr", "DLmw"),
    "branches_per_step": ("Bc", "Bi"),
    "mispredicts_per_step": ("Bcm", "Bim"),
}


# One process's counts per thread: {thread number: {event: count}}, thread 1 the main one.
ThreadCounts = Dict[int, Dict[str, int]]


def instruction_steps(quick: bool) -> Tuple[int, int]:
    return (10, 30) if quick else (100, 600)


def instruction_jobs(
    args: argparse.Namespace,
    chosen: Dict[str, Any],
    systems: List[str],
    have_determined: bool,
    *,
    cache: bool = False,
) -> Tuple[Runs, Dict[Tuple[str, str], str]]:
    """Instructions per training step, counted by valgrind's callgrind (with ``cache``: also its
    simulated cache misses and branch mispredicts, ``CACHE_EVENTS``): the same on a busy
    machine as on an idle one, so all the processes run at once.

    Each (workload, system) runs as two whole processes, a fit of ``steps[0]`` and one of
    ``steps[1]`` training steps, with every thread counted apart (``--separate-threads=yes``);
    the difference over the extra steps is the cost per step, every thread's included (a
    TensorBoard event writer's, a checkpoint writer's). Counting whole processes does not depend
    on when another thread does its share, which dumps requested by the main thread did."""
    steps = instruction_steps(args.quick)
    names = CACHE_WORKLOADS if cache else INSTRUCTION_WORKLOADS
    jobs = [
        (system, chosen[name], n)
        for name in names
        if name in chosen
        for system in systems_for(name, have_determined)
        if system in systems and system != "raw-best"  # on a CPU, raw's very instructions
        for n in steps
    ]
    runs: Runs = {}
    failures: Dict[Tuple[str, str], str] = {}
    counted: Dict[Tuple[str, str], Dict[int, ThreadCounts]] = {}
    width = max(1, args.jobs or os.cpu_count() or 1)
    label = "cache" if cache else "instructions"
    wanted = CACHE_EVENTS if cache else {"instructions_per_step": ("Ir",)}
    for first in range(0, len(jobs), width):
        batch = jobs[first : first + width]
        started = [
            _start_callgrind(system, w, n, args.quick, cache=cache) for system, w, n in batch
        ]
        for (system, w, n), (scratch, proc) in zip(batch, started):
            code = proc.wait()
            key = (w.name, system)
            found = _callgrind_counts(scratch, proc.pid)
            if code != 0 or found is None:
                failures.setdefault(key, _why(scratch / "log.txt", code))
            elif key not in failures:
                counted.setdefault(key, {})[n] = found
                if len(counted[key]) == len(steps):
                    runs[key] = [per_step(counted[key], steps, wanted)]
            if n == steps[-1] or key in failures:
                print(
                    f"[{label}] {w.name:<12} {system:<17} "
                    f"{'ok' if key in runs else 'FAILED' if key in failures else ''}",
                    flush=True,
                )
            shutil.rmtree(scratch, ignore_errors=True)
    return runs, failures


def per_step(
    counts: Dict[int, ThreadCounts], steps: Tuple[int, int], wanted: Dict[str, Tuple[str, ...]]
) -> Dict[str, float]:
    """Each ``wanted`` field per training step: its events summed over every thread, in the
    longer fit's process minus the shorter one's, over the steps between them; and, as
    ``other_threads_<field>``, the share of the threads other than the main one.

    >>> few = {1: {"Ir": 900, "Bcm": 5, "Bim": 1}, 2: {"Ir": 100}}
    >>> many = {1: {"Ir": 5000, "Bcm": 55, "Bim": 11}, 2: {"Ir": 600}, 3: {"Ir": 400}}
    >>> per_step({100: few, 600: many}, (100, 600), {"ir": ("Ir",), "mispredicts": ("Bcm", "Bim")})
    {'ir': 10.0, 'other_threads_ir': 1.8, 'mispredicts': 0.12, 'other_threads_mispredicts': 0.0}
    """
    few, many = counts[steps[0]], counts[steps[1]]

    def summed(threads: ThreadCounts, events: Tuple[str, ...], main: bool) -> int:
        return sum(c.get(e, 0) for t, c in threads.items() if main or t != 1 for e in events)

    result: Dict[str, float] = {}
    for field, events in wanted.items():
        for prefix, everything in (("", True), ("other_threads_", False)):
            extra = summed(many, events, everything) - summed(few, events, everything)
            result[prefix + field] = extra / (steps[1] - steps[0])
    return result


def _start_callgrind(
    system: str, w: Any, fit_steps: int, quick: bool, *, cache: bool
) -> Tuple[pathlib.Path, subprocess.Popen]:
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="det-lightning-bench-cg-"))
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        f"--callgrind-out-file={scratch}/cg.%p",
        *(["--cache-sim=yes", "--branch-sim=yes"] if cache else []),
        sys.executable,
        str(HERE / "worker.py"),
        system,
        w.name,
        str(scratch / "out.json"),
        "--scratch",
        str(scratch),
        "--fit-steps",
        str(fit_steps),
    ]
    if quick:
        cmd.append("--quick")
    env = dict(_env(scratch, system), PYTHONHASHSEED="0")
    with open(scratch / "log.txt", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=scratch, stdout=log, stderr=log)
    return scratch, proc


def _callgrind_counts(scratch: pathlib.Path, pid: int) -> Optional[ThreadCounts]:
    """The counts of process ``pid`` per thread, from the files callgrind writes at its end
    with ``--separate-threads=yes`` (``cg.<pid>-<thread>``, ``Ir``: instructions); None when
    there are none (the process did not end normally). Files of other processes (a child
    forked by the framework) are not read: each system's own children are its business, and
    counted the same in both fits."""
    threads: ThreadCounts = {}
    for path in scratch.glob(f"cg.{pid}-*"):
        thread, events, total = None, ["Ir"], None
        for line in path.read_text(errors="replace").splitlines()[:60]:
            if line.startswith("thread:"):
                thread = int(line.split()[1])
            elif line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                total = [int(n) for n in line.split()[1:]]
        if thread is not None and total is not None:
            threads[thread] = dict(zip(events, total))
    return threads if 1 in threads else None


def _why(log: pathlib.Path, code: int) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [
        ln
        for ln in lines
        if ("Error" in ln or "Exception" in ln)
        and "ChildFailedError" not in ln
        and not ln.startswith("raise ")
    ]
    last = (errors or lines or ["no output"])[-1]
    return f"exit code {code}: {last[:300]}".replace("|", "/")


def machine() -> Dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(pathlib.Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def versions() -> Dict[str, str]:
    found = {}
    for dist in ("torch", "lightning", "det-lightning", "determined", "numpy"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def plan(
    chosen: Dict[str, Any], systems: List[str], quick: bool, have_determined: bool
) -> List[Tuple[str, List[Any]]]:
    """(system, workloads) per worker process, in run order: one process per workload and
    system; with ``quick``, one per system and process count (start-up first, as it must be)."""
    jobs: List[Tuple[str, List[Any]]] = []
    for w in chosen.values():
        for system in systems_for(w.name, have_determined):
            if system in systems:
                jobs.append((system, [w]))
    if quick:
        merged: Dict[Tuple[str, int], List[Any]] = {}
        for system, ws in sorted(jobs, key=lambda j: j[1][0].name != "startup"):
            merged.setdefault((system, ws[0].processes), []).extend(ws)
        jobs = [(system, ws) for (system, _), ws in merged.items()]
    if "startup" in chosen:
        jobs.append(("import", [workloads.Workload("import", "import", "mlp", 1, 0)]))
    return jobs


def collect(
    args: argparse.Namespace, jobs: List[Tuple[str, List[Any]]]
) -> Tuple[Runs, Dict[Tuple[str, str], str], List[Dict[str, Any]]]:
    runs: Runs = {}
    failures: Dict[Tuple[str, str], str] = {}
    every: List[Dict[str, Any]] = []
    timeout = 300.0 if args.quick else 900.0
    for rep in range(args.repeats):
        for system, ws in jobs:
            keys = [(w.name, system) for w in ws]
            if all(k in failures for k in keys):
                continue  # it failed once; it would fail again and cost the timeout
            t0 = time.perf_counter()
            results, why = run_job(system, ws, args.quick, timeout)
            took = time.perf_counter() - t0
            names = ",".join(w.name for w in ws)
            status = "ok" if results else f"FAILED ({why})"
            print(
                f"[rep {rep + 1}/{args.repeats}] {names:<12} {system:<17} {took:6.1f} s  {status}",
                flush=True,
            )
            for key in keys:
                if results is None:
                    failures[key] = why
                    runs.pop(key, None)
                    continue
                result = dict(results[key[0]], system=system, workload=key[0], repetition=rep)
                every.append(result)
                if rep > 0 or not drops_first(args):
                    runs.setdefault(key, []).append(result)
    return runs, failures, every


def drops_first(args: argparse.Namespace) -> bool:
    """Whether the first repetition is a warm-up, left out of the results."""
    return args.repeats > 1 and not args.no_warm_up


def render(
    args: argparse.Namespace, report: Report, have_determined: bool, started: str, *, took: float
) -> str:
    counted = args.repeats - 1 if drops_first(args) else args.repeats
    steps = instruction_steps(args.quick)
    mach, vers = machine(), versions()
    lines = [
        f"# det_lightning overhead, {hardware()}, {started[:10]}{' (quick smoke run)' if args.quick else ''}",
        "",
        f"Command: `{' '.join(['python benchmarks/run.py', *args.argv])}` "
        f"({took / 60:.1f} min, {args.repeats} repetition(s)). Each cell: median over {counted} "
        f"repetition(s){', the first (warm-up) repetition dropped' if drops_first(args) else ''}; "
        "every system and repetition in its own process, one at a time, interleaved.",
        "",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory']}, {mach['os']}; "
        "one thread per process (`OMP_NUM_THREADS=1`, `torch.set_num_threads(1)`).",
        f"Versions: Python {mach['python']}, torch {vers['torch']}, lightning {vers['lightning']}, "
        f"det_lightning {vers['det-lightning']}, determined {vers['determined']}"
        f"{'' if have_determined else ' (not importable: its rows are skipped)'}, "
        f"numpy {vers['numpy']}; det_lightning source: {source_state()}.",
        "",
        "## Training steps",
        "",
        "Time between the starts of consecutive training steps (so everything the framework does "
        "between steps counts), first tenth of the steps skipped. Peak RSS: `ru_maxrss` of the "
        "whole process (rank 0), imports and data included. Same weights: the final weights "
        "sum to raw's within 1e-5.",
        "",
        *report.steps_table(),
        "",
        *(
            [
                "## Instructions per training step",
                "",
                "Counted by valgrind's callgrind (`--instructions`): the instructions of a whole "
                f"process that fits {steps[1]} steps minus those of one that fits {steps[0]}, "
                f"over {steps[1] - steps[0]}, every thread counted (`--separate-threads=yes`; "
                "the other threads' share in its own column). Deterministic, so unlike the "
                "times above it does not move with the machine's other load; it ignores cache "
                "misses and waiting.",
                "",
                *report.instructions_table(),
                "",
            ]
            if args.instructions
            else []
        ),
        *(
            [
                "## Cache misses and branch mispredicts per training step",
                "",
                "Counted by callgrind's cache and branch-predictor simulation (`--cache`, "
                "`--cache-sim=yes --branch-sim=yes`; the machine's own cache sizes): the same "
                f"difference of a {steps[1]}-step and a {steps[0]}-step process as above, so "
                "deterministic. Where instructions per step are level and time is not, these "
                "are where the time goes: a first-level miss costs about 10 cycles, a last-level "
                "miss 100 or more, a mispredicted branch 15 to 20.",
                "",
                *report.cache_table(),
                "",
            ]
            if args.cache
            else []
        ),
        "## Checkpoint",
        "",
        "Save: the extra time of the between-step gaps that held a save (every 2 batches), over "
        "the other gaps: how long the training loop was blocked (det_lightning writes in a "
        "background thread: the state copy, plus waiting for the previous write when it is still "
        "going; `sync_checkpoints=True` writes in the training thread). Every step ends with "
        "`os.sync()`, so each save starts with nothing left to write back. Training loop: first "
        "step's start to last step's end; fit(): the whole first fit, start-up and the wait for "
        "the last write included. State copied: the tensors a background write copies. "
        "Bare `torch.save` is of the same state (weights + Adam) by the raw "
        'loop; "same process" compares with two bare saves each process does after its own '
        "(on this VM the same 289 MB `torch.save` takes from 0.28 s to 0.75 s from one process "
        "or moment to the next, so read the ratios with care). det_lightning fsyncs its files; the real "
        "Determined does not. Load: time to the first step of a resumed fit minus that of a fresh "
        "one (raw: `torch.load` + `load_state_dict`).",
        "",
        *report.checkpoint_table(),
        "",
        "## Start-up",
        "",
        *report.startup_table(),
        "",
        *report.import_lines(),
        "",
        "## Targets",
        "",
        *report.targets_table(),
    ]
    failures = report.failure_lines()
    if failures:
        lines += ["", "## Not measured", "", *failures]
    return "\n".join(lines) + "\n"


def source_state() -> str:
    """The checkout measured: commit, and whether the working tree differed from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "det_lightning", "adapters"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{commit}{' + uncommitted changes' if dirty else ''}"


def hardware() -> str:
    return f"cpu-{os.cpu_count()}core"


def cuda_refusal(args: argparse.Namespace, chosen: Dict[str, Any]) -> Optional[str]:
    """Why ``--device cuda`` cannot run as asked (one line), or None."""
    if args.instructions or args.cache:
        return (
            "benchmarks/run.py: --instructions and --cache count a CPU's instructions under "
            "valgrind; run them with --device cpu"
        )
    unfit = [n for n, w in chosen.items() if w.processes > 1 or w.measures != "steps"]
    if unfit:
        return (
            f"benchmarks/run.py: workloads {unfit} do not run with --device cuda (one GPU, "
            f"training steps only); choose from {','.join(workloads.DEFAULTS['cuda'])}"
        )
    import cuda_window  # torch with it: only when --device cuda

    return cuda_window.missing_cuda()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps per workload")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repetitions, the first dropped (default 5, quick 1)",
    )
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="count the first repetition too: the machine's caches were warmed by a run just "
        "before (scripts/gpu-check.sh's workloads after its first)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the models train (cuda: the first GPU; one process per workload)",
    )
    parser.add_argument(
        "--workloads",
        default=None,
        help="comma-separated; default: "
        + "; ".join(f"{d}: {','.join(names)}" for d, names in workloads.DEFAULTS.items()),
    )
    parser.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help="comma-separated subset of " + ",".join(ALL_SYSTEMS),
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions per step under valgrind (slow, but immune to a busy machine)",
    )
    parser.add_argument(
        "--cache",
        action="store_true",
        help="also count simulated cache misses and branch mispredicts per "
        "step on the MLP under valgrind (deterministic, like --instructions)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="valgrind processes at once for --instructions/--cache (default: "
        "one per core; their counts do not depend on it, only the wall time)",
    )
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    args = parser.parse_args(argv)
    args.argv = [a for a in (sys.argv[1:] if argv is None else argv)]
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    every = workloads.by_name(args.quick, args.device)
    names = args.workloads.split(",") if args.workloads else workloads.DEFAULTS[args.device]
    unknown = [n for n in names if n not in every]
    if unknown:
        parser.error(f"unknown workloads {unknown}; known: {', '.join(every)}")
    chosen = {n: every[n] for n in names}
    if args.device == "cuda":
        refused = cuda_refusal(args, chosen)
        if refused:
            print(refused, file=sys.stderr)
            return 2
    have_determined = importlib.util.find_spec("determined") is not None
    started = datetime.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    systems = args.systems.split(",")
    runs, failures, all_results = collect(args, plan(chosen, systems, args.quick, have_determined))
    if args.instructions:
        counted, failed = instruction_jobs(args, chosen, systems, have_determined)
        runs.update({(f"{w}#instructions", s): r for (w, s), r in counted.items()})
        failures.update({(f"{w}#instructions", s): r for (w, s), r in failed.items()})
    if args.cache:
        counted, failed = instruction_jobs(args, chosen, systems, have_determined, cache=True)
        runs.update({(f"{w}#cache", s): r for (w, s), r in counted.items()})
        failures.update({(f"{w}#cache", s): r for (w, s), r in failed.items()})
    report = Report(runs, failures, [s for s in ALL_SYSTEMS if s in systems], chosen)
    if args.device == "cuda":
        facts = cuda_tables.device_facts()
        host = {**machine(), **versions(), "source": source_state()}
        command = " ".join(["python benchmarks/run.py", *args.argv])
        text = cuda_tables.render(
            command,
            args.repeats,
            report,
            facts,
            host=host,
            started=started,
            dropped=drops_first(args),
        )
        theme, where = "overhead-cuda", cuda_tables.slug(facts["name"])
    else:
        text = render(args, report, have_determined, started, took=time.perf_counter() - t0)
        theme, where = "overhead", hardware()
    if args.quick:
        theme += "-quick"
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{theme}_{where}_{started[:10]}.md"
    path.write_text(text)
    path.with_suffix(".json").write_text(json.dumps(all_results, indent=1))
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
