"""``benchmarks/run.py --device`` and ``scripts/gpu-check.sh``: what runs without a GPU.

The CUDA measurements themselves (``benchmarks/cuda_window.py``) need a device and run only there
(``scripts/gpu-check.sh``); these check the rest: refusing ``--device cuda`` clearly where no
device is visible, the AMP workload through every system on the CPU (the code paths the CUDA run
shares), the CUDA report's shape, and the examples in the new modules' docstrings.
"""

import doctest
import importlib
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
from typing import Any, Dict, Iterator, List

import pytest

from tests.fixtures import warm

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RUN = [sys.executable, str(BENCHMARKS / "run.py")]


def _no_gpu_env() -> Dict[str, str]:
    # Hides any GPU from torch, so the refusal is tested on a GPU machine too.
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def bench() -> Iterator[Dict[str, Any]]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        names = ("cuda_window", "cuda_tables", "workloads", "profile_diff")
        yield {n: importlib.import_module(n) for n in names}
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("name", ["cuda_window", "cuda_tables", "workloads", "profile_diff"])
def test_docstring_examples(bench: Dict[str, Any], name: str) -> None:
    result = doctest.testmod(bench[name])
    assert result.attempted > 0 and result.failed == 0


def _refused(tmp_path: pathlib.Path, *args: str) -> str:
    out = tmp_path / "results"
    proc = subprocess.run(
        [*RUN, "--device", "cuda", "--quick", "--out", str(out), *args],
        capture_output=True,
        text=True,
        env=_no_gpu_env(),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not out.exists()  # refused before anything ran
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_no_visible_cuda_device_exits_2_with_one_line_saying_what_to_run(
    tmp_path: pathlib.Path,
) -> None:
    line = _refused(tmp_path)
    assert "no CUDA device is visible" in line
    assert "--device cpu" in line and "scripts/gpu-check.sh" in line


def test_gpu_check_without_a_visible_device_exits_2_having_run_nothing() -> None:
    """``scripts/gpu-check.sh`` (tests/gpu and the CUDA benchmark in one command) on a machine
    where torch sees no CUDA device: one line saying so, exit 2, no venv made, no report."""
    env = {k: v for k, v in _no_gpu_env().items() if k != "PYTHON"}
    before = set((ROOT / "benchmarks" / "results").iterdir())
    had_venv = (ROOT / ".venv-gpu").exists()
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("scripts/gpu-check.sh: ") and "CUDA" in line, line
    assert proc.stdout == ""
    assert set((ROOT / "benchmarks" / "results").iterdir()) == before
    assert (ROOT / ".venv-gpu").exists() == had_venv


@pytest.mark.parametrize(
    "args, says",
    [
        (["--instructions"], "run them with --device cpu"),
        (["--workloads", "ddp-mlp"], "do not run with --device cuda"),
        (["--workloads", "checkpoint"], "do not run with --device cuda"),
    ],
)
def test_cuda_refuses_what_only_a_cpu_run_measures(
    tmp_path: pathlib.Path, args: List[str], says: str
) -> None:
    assert says in _refused(tmp_path, *args)


@pytest.mark.slow
def test_amp_workload_trains_the_same_weights_in_every_system_on_the_cpu(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The AMP recipe (float16 autocast and a GradScaler) and the device argument threaded
    through every system, on the CPU: what ``--device cuda`` runs, bar the device. ``run.py``'s
    ``main`` runs here, its workers forked from the warm launcher (tests/fixtures/warm.py)."""
    systems = ["raw", "raw-best", "lightning", "det_lightning"]
    if importlib.util.find_spec("determined") is not None:
        systems.append("determined")
    out = tmp_path / "results"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # as _no_gpu_env(): no GPU on a GPU machine
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    run = importlib.import_module("run")
    monkeypatch.setattr(run, "launch", warm.run)
    argv = ["--device", "cpu", "--quick", "--workloads", "amp", "--systems", ",".join(systems)]
    assert run.main([*argv, "--out", str(out)]) == 0
    [report] = out.glob("overhead-quick_cpu-*core_*.md")
    rows = [
        r for r in report.read_text().splitlines() if r.startswith("| CNN 3x32x32, batch 64, f")
    ]
    assert len(rows) == len(systems), report.read_text()
    for row in rows:
        assert row.rstrip().endswith("| yes |") or "raw PyTorch loop" in row, row


def test_cuda_report_names_the_device_and_has_a_row_per_system(bench: Dict[str, Any]) -> None:
    """The report's shape, from worker results written by hand (no device measured here)."""
    from report import Report

    chosen = {n: w for n, w in bench["workloads"].by_name(True, "cuda").items() if n == "amp"}
    run = {"device_per_step_s": 0.002, "syncs_per_batch": 1.0, "peak_memory_mb": 12.5}
    runs = {
        ("amp", "raw"): [{**run, "checksum": 1.0}],
        ("amp", "raw-best"): [{**run, "device_per_step_s": 0.0025, "checksum": 1.0}],
        ("amp", "det_lightning"): [{**run, "device_per_step_s": 0.003, "checksum": 1.0}],
    }
    failures = {("amp", "determined"): "exit code 1: RuntimeError: boom"}
    report = Report(runs, failures, ["raw", "raw-best", "det_lightning", "determined"], chosen)
    facts = {
        "name": "Some GPU",
        "capability": "sm_90",
        "memory": "80 GiB",
        "driver": "580.1",
        "cuda": "13.0",
        "cudnn": "91000",
        "torch": "2.13.0+cu130",
    }
    host = {
        "cpu": "x",
        "cores": "16",
        "memory": "128 GiB",
        "os": "Linux",
        "python": "3.12",
        "lightning": "2.6.6",
        "det-lightning": "0.1.0",
        "determined": "0.38.1",
        "numpy": "2",
        "source": "abc",
    }
    text = bench["cuda_tables"].render(
        "python benchmarks/run.py", 5, report, facts, host=host, started="2026"
    )
    assert "Device: Some GPU (sm_90, 80 GiB), driver 580.1, CUDA 13.0" in text
    assert "| × raw | × raw-best | × Determined | × Lightning | syncs / batch |" in text
    assert "| det_lightning | 3.000 | 1.50 | 1.20 | — | — | 1.00 | 12.5 | yes |" in text
    assert "| raw loop, pinned + non-blocking (raw-best) | 2.500 | 1.25 | 1.00 |" in text
    assert "not measured: exit code 1: RuntimeError: boom" in text
    assert "(5 repetition(s), the first (warm-up) dropped)" in text


def test_gpu_wheels_lists_what_the_gpu_machine_needs_from_this_venv(
    tmp_path: pathlib.Path,
) -> None:
    """``scripts/gpu-check.sh --prepare``'s list: what the check's imports load, as installed
    here; Determined's storage libraries, which ``determined.pytorch`` never imports, are not on
    it (the download itself needs an index: not tested)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        wheels = importlib.import_module("gpu_wheels")
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    found = wheels.imported()
    assert {"determined", "appdirs", "lightning", "pytest", "pytest-xdist", "torch"} <= set(found)
    assert found["determined"] == "0.38.1"
    # Nothing that only Determined's storage (or a search) would use comes in through
    # determined.pytorch. (Where a Lightning dependency pulls one in, here transformers 5.20 on
    # Python 3.10 importing accelerate and botocore, the list has it, as the machine needs it.)
    storage = {"boto3", "botocore", "google-api-python-client", "optuna"}
    assert not storage & set(wheels.imported("import determined.pytorch"))
    without = wheels.imported("import det_lightning.adapters, lightning, pytest, xdist")
    assert storage & set(found) == storage & set(without)
    assert not wheels.NEVER.match("optuna") and wheels.NEVER.match("nvidia-cublas")
    listing = tmp_path / "KINDS.md"
    listing.write_text("# machines\n\nPackages: absl-py, Typing_Extensions, zipp.\n")
    assert wheels.names_in(listing) == {"absl-py", "typing-extensions", "zipp"}


# The GPU machine's Python, played by a shell script: it sees a CUDA device, and it records each
# test and benchmark command instead of running it (each benchmark writes a one-line report where
# run.py would), so that the plan gpu-check.sh makes from its budget is checked on the CPU.
MACHINE_PYTHON = r"""#!/usr/bin/env bash
case "$*" in
  *torch.__version__*) echo describe >> "$CALLS.all"
    echo "torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200"; exit 0 ;;
  *"import xdist"*) echo xdist >> "$CALLS.all"; [ -n "$HAS_XDIST" ] ;;
  *gpu_install.py*) echo install >> "$CALLS.all"; echo "gpu_install: added nothing in $1"; exit 0 ;;
  *"-m pytest"*) echo pytest >> "$CALLS.all"; echo "$*" >> "$CALLS"; echo "15 passed in 1.00s"; exit 0 ;;
  *profile_diff.py*) echo diff >> "$CALLS.all"; echo "$*" >> "$CALLS"; exit 0 ;;
  *benchmarks/run.py*)
    echo bench >> "$CALLS.all"; echo "$*${BENCH_CUDA_PROFILE:+ PROFILE=$BENCH_CUDA_PROFILE}" >> "$CALLS"
    out=$(printf '%s\n' "$@" | grep -A1 -- '^--out$' | tail -n 1)
    mkdir -p "$out" && echo "report of: $*" > "$out/overhead-cuda-quick_nvidia-h200.md"
    sleep "${BENCH_SLEEP:-0}"; exit 0 ;;
  *) echo "machine python: unexpected $*" >&2; exit 9 ;;
esac
"""


def _gpu_check(
    tmp_path: pathlib.Path, **env: str
) -> "tuple[subprocess.CompletedProcess, List[str]]":
    python = tmp_path / "python3"
    python.write_text(MACHINE_PYTHON)
    python.chmod(0o755)
    calls, out = tmp_path / "calls", tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHON": str(python),
            "CALLS": str(calls),
            "OUT": str(out),
            "GPU_CHECK_RESULTS": str(tmp_path / "results"),
            **env,
        },
        timeout=300,
    )
    return proc, calls.read_text().splitlines() if calls.exists() else []


def test_gpu_check_warms_up_once_and_counts_two_repetitions_of_every_workload(
    tmp_path: pathlib.Path,
) -> None:
    """The plan on a machine with pytest-xdist: tests/gpu in four processes, then the four
    workloads, the first after a warm-up repetition, the others with both counted; each report
    and the log copied to ``$OUT`` as written."""
    proc, calls = _gpu_check(tmp_path, HAS_XDIST="1", GPU_CHECK_PROCESS_S="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Two starts of the machine's Python before the tests (on the GPU image each takes seconds):
    # the device line, and the install with its import proof (and, in it, the labels report).
    starts = (tmp_path / "calls.all").read_text().split()
    assert starts == ["describe", "install", "xdist", "pytest"] + ["bench"] * 4
    assert "scripts/gpu-check.sh: torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200 (" in proc.stdout
    pytest_call, *bench_calls = calls
    assert "-m pytest -m gpu tests/gpu" in pytest_call and pytest_call.endswith("-n 4")
    assert [c.split("--workloads ")[1].split()[0] for c in bench_calls] == [
        "mlp",
        "validation",
        "amp",
        "cnn",
    ]
    assert "--repeats 3 " in bench_calls[0] and "--no-warm-up" not in bench_calls[0]
    assert all("--repeats 2 --no-warm-up " in c for c in bench_calls[1:])
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["gpu-check.log"]
        + [f"{w}-overhead-cuda-quick_nvidia-h200.md" for w in ("mlp", "validation", "amp", "cnn")]
    )
    log = (out / "gpu-check.log").read_text()
    assert "benchmark: mlp validation amp cnn" in log and "scripts/gpu-check.sh: done" in log


def test_gpu_check_runs_the_workloads_that_fit_the_time_left(tmp_path: pathlib.Path) -> None:
    """Without pytest-xdist the tests run in one process. With 20 s in all and an estimate of
    1 s a process (3 systems: 9 s for the first workload, 6 s for each after), a first workload
    that takes 15 s leaves too little for the others: each is named as not run, and the check
    still ends well."""
    proc, calls = _gpu_check(
        tmp_path, GPU_CHECK_BUDGET_S="20", GPU_CHECK_PROCESS_S="1", BENCH_SLEEP="15"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pytest_call, *bench_calls = calls
    assert "-n 4" not in pytest_call
    assert len(bench_calls) == 1 and "--workloads mlp " in bench_calls[0]
    for w in ("validation", "amp", "cnn"):
        assert f"== {w}: not run (" in proc.stdout
    assert proc.stdout.count("about 6 s needed") == 3
    assert "benchmark: mlp (reports in" in proc.stdout


def test_gpu_check_profiles_what_it_is_asked_to_after_the_benchmark(
    tmp_path: pathlib.Path,
) -> None:
    """``GPU_CHECK_PROFILE=validation``: after the measured workloads, one profiled run of it
    per system (det_lightning and Determined), its tables in ``$OUT/prof``, so that one device
    call brings back both the measurements and the profile. A profile that does not fit the
    time left is named as not run."""
    proc, calls = _gpu_check(
        tmp_path,
        GPU_CHECK_PROCESS_S="1",
        GPU_CHECK_WORKLOADS="mlp",
        GPU_CHECK_PROFILE="validation,amp",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, measured, *profiled, diff = calls
    assert "--workloads mlp " in measured and "PROFILE=" not in measured
    out = tmp_path / "out"
    assert diff.endswith(f"benchmarks/profile_diff.py {out}/prof --base determined")
    assert [c.split("--workloads ")[1].split()[0] for c in profiled] == ["validation", "amp"]
    for call in profiled:
        assert "--repeats 1 --no-warm-up " in call and "--systems det_lightning,determined " in call
        assert call.endswith(f"PROFILE={out}/prof")
    assert "profiled: validation amp (tables in" in proc.stdout

    (tmp_path / "short").mkdir()
    proc, calls = _gpu_check(
        tmp_path / "short",
        GPU_CHECK_BUDGET_S="20",
        GPU_CHECK_PROCESS_S="1",
        GPU_CHECK_WORKLOADS="mlp",
        GPU_CHECK_PROFILE="validation",
        # Six systems at 1 s each: more than the at most 5 s the 15 s benchmark leaves.
        GPU_CHECK_PROFILE_SYSTEMS="det_lightning,determined,raw-best,raw,lightning,determined+tb",
        BENCH_SLEEP="15",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(calls) == 2 and "== validation, profiled: not run (" in proc.stdout
    assert "profiled: none (tables in" in proc.stdout


def test_a_profiled_window_writes_the_profilers_table_named_for_its_worker(
    bench: Dict[str, Any], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``BENCH_CUDA_PROFILE``'s pieces on the CPU (the window itself needs a device): the table
    names the operations the window ran, in a file named for the worker's system and workload;
    a report of profiled runs says that its times are not measurements."""
    import torch

    window = bench["cuda_window"]
    monkeypatch.setattr(sys, "argv", ["worker.py", "det_lightning", "validation", "out.json"])
    profiler = window.start_profiler()
    torch.ones(64, 64) @ torch.ones(64, 64)
    profiler.__exit__(None, None, None)
    path = window.write_profile(profiler, str(tmp_path / "profiles"))
    assert path.name.startswith("det_lightning-validation-") and path.suffix == ".txt"
    assert "aten::mm" in path.read_text()
    record = json.loads(path.with_suffix(".json").read_text())
    assert (record["system"], record["workload"], record["steps"]) == (
        "det_lightning",
        "validation",
        1,
    )
    [mm] = [row for row in record["per_step"] if row["name"] == "aten::mm"]
    assert mm["calls"] == 1 and mm["self_cpu_us"] > 0
    report = bench["cuda_tables"].Report(
        {("validation", "det_lightning"): [{"profiled": True}]}, {}, ["det_lightning"], {}
    )
    assert "**Profiled**" in bench["cuda_tables"].profiled_lines(report)[0]


def test_profile_diff_names_what_one_system_ran_more_of_per_step(
    bench: Dict[str, Any],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Two profiled windows of the same workload, one with an extra operation per step: the
    comparison lists it with its calls per step (3 against none) and the time it added."""
    import torch

    window, diff = bench["cuda_window"], bench["profile_diff"]
    folder = tmp_path / "prof"
    torch.sigmoid(torch.ones(32, 32) @ torch.ones(32, 32))  # first calls' costs out of both
    for system, extra in (("det_lightning", 3), ("determined", 0)):
        monkeypatch.setattr(sys, "argv", ["worker.py", system, "validation", "out.json"])
        profiler = window.start_profiler()
        for _ in range(2):  # two steps
            x = torch.ones(32, 32) @ torch.ones(32, 32)
            for _ in range(extra):
                x = torch.sigmoid(x)
        profiler.__exit__(None, None, None)
        window.write_profile(profiler, str(folder), steps=2)
    assert diff.main([str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "validation: det_lightning - determined, per timed step (2 and 2 steps)"
    [sigmoid] = [line.split() for line in out if line.startswith("    aten::sigmoid ")][:1]
    assert sigmoid[-2:] == ["3.00", "0.00"] and float(sigmoid[-3]) > 0, out
    assert diff.main([str(tmp_path / "none")]) == 1
