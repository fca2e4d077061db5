"""The markdown report of ``run.py --device cuda``: time per step, synchronisations per batch
and peak memory on the device, per workload and system (what ``cuda.CudaWindow`` measured).

First produced on an H100 (2026-11-26), then on an H200 (``benchmarks/results/``);
``tests/integration/test_benchmark_device.py`` renders it from made-up worker results to check its
shape on the CPU.
"""

import json
import pathlib
import subprocess
import sys
from typing import Any, Dict, List, Tuple

from report import Column, Report

METHOD = (
    "Every workload and system runs in its own process, one at a time, interleaved within each "
    "repetition; each cell is the median (min–max) over the counted repetitions. One fit of "
    "N batches is cut into three windows (`benchmarks/cuda_window.py`): the first tenth of the batches "
    "is warm-up (CUDA context, cuDNN autotuning, the allocator's pool); the next quarter of "
    "the rest, at most 50 batches, counts host-device synchronisations; the batches after that "
    "are timed, with `torch.cuda.synchronize()` once before the first and once after the last "
    "of them and none in between, so the time is the device's and the host's together, "
    "whichever is slower. **Syncs / batch**: the synchronising operations torch itself reports "
    "under `torch.cuda.set_sync_debug_mode('warn')` (`.item()`, a copy to or from pageable host "
    "memory, `nonzero`, ...) over whole batches: the step and what the framework does until "
    "the next one starts; where each one was made is listed below the table. The raw loop and "
    "Determined copy batches from pageable memory with a blocking `.to(device)` (one sync per "
    "tensor); raw-best and det_lightning pin them in the loader and copy with "
    "`non_blocking=True`, as native Lightning copies. **Peak memory**: "
    "`torch.cuda.max_memory_allocated()` after the warm-up (reset then), tensors only, not the "
    "allocator's cache or the CUDA context. **Same weights**: the final weights' sum against "
    "raw's (on a GPU, kernels may reduce in another order from one process to the next, so a "
    "small difference can be the device's, not the framework's)."
)


def device_facts() -> Dict[str, str]:
    """``cuda_window.describe_device()``, asked of a child process so that this one (which only starts
    the workers) never holds a CUDA context of its own while they run."""
    code = "import json, cuda_window as w; print(json.dumps(w.describe_device()))"
    here = pathlib.Path(__file__).resolve().parent
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=here, timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError(f"describing the CUDA device failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slug(name: str) -> str:
    """A device name as a file-name part.

    >>> slug("NVIDIA H100 80GB HBM3")
    'nvidia-h100-80gb-hbm3'
    """
    kept = "".join(c if c.isalnum() else "-" for c in name.lower())
    return "-".join(part for part in kept.split("-") if part)


def device_line(facts: Dict[str, str]) -> str:
    """
    >>> device_line({"name": "G", "capability": "sm_90", "memory": "80 GiB", "driver": "580",
    ...              "cuda": "13.0", "cudnn": "91000", "torch": "2.11.0+cu130"})
    'Device: G (sm_90, 80 GiB), driver 580, CUDA 13.0 (torch built with), cuDNN 91000, torch 2.11.0+cu130.'
    """
    return (
        f"Device: {facts['name']} ({facts['capability']}, {facts['memory']}), driver "
        f"{facts['driver']}, CUDA {facts['cuda']} (torch built with), cuDNN {facts['cudnn']}, "
        f"torch {facts['torch']}."
    )


# What each row is compared with on a device: the careful loop (pinned memory, non-blocking
# copies, no .item() per batch) is the limit, Determined the reference.
DEVICE_RATIOS = ("raw", "raw-best", "determined", "lightning")

# The step table's columns on a device (report.Column).
DEVICE_TIME: Column = ("ms / step", "device_per_step_s", 1e3, 3)
DEVICE_COLUMNS: Tuple[Column, ...] = (
    ("syncs / batch", "syncs_per_batch", 1, 2),
    ("peak memory MB", "peak_memory_mb", 1, 1),
)


def render(
    command: str,
    repeats: int,
    report: Report,
    facts: Dict[str, str],
    *,
    host: Dict[str, Any],
    started: str,
    dropped: bool = True,
) -> str:
    """The whole report; ``host`` is ``run.machine()`` and ``versions()`` merged, with the
    source's state under ``"source"``; ``dropped``: the first repetition was a warm-up."""
    lines = [
        f"# det_lightning overhead on a CUDA device, {facts['name']}, {started[:10]}",
        "",
        f"Command: `{command}` ({repeats} repetition(s)"
        f"{', the first (warm-up) dropped' if dropped and repeats > 1 else ''}).",
        "",
        device_line(facts),
        f"Host: {host['cpu']}, {host['cores']} cores, {host['memory']}, {host['os']}; Python "
        f"{host['python']}, lightning {host['lightning']}, det_lightning "
        f"{host['det-lightning']}, determined {host['determined']}, numpy {host['numpy']}; "
        f"det_lightning source: {host['source']}.",
        "",
        "## Training steps on the device",
        "",
        METHOD,
        "",
        *profiled_lines(report),
        *report.steps_table(DEVICE_TIME, DEVICE_COLUMNS, DEVICE_RATIOS),
    ]
    lines += sync_site_lines(report)
    failures = report.failure_lines()
    if failures:
        lines += ["", "## Not measured", "", *failures]
    return "\n".join(lines) + "\n"


def sync_site_lines(report: Report) -> List[str]:
    """Where the counted synchronisations were made: for each workload and system that made any,
    each source line (``cuda_window.sync_sites``) with its count per counted run, most first.

    >>> runs = {("mlp", "a"): [{"sync_sites": {"x.py:3": 4, "y.py:9": 1}},
    ...                        {"sync_sites": {"x.py:3": 4}}],
    ...         ("mlp", "b"): [{"sync_sites": {}}]}
    >>> print("\\n".join(sync_site_lines(Report(runs, {}, ["a", "b"], {}))))
    <BLANKLINE>
    ## Where the synchronisations were made
    <BLANKLINE>
    Each source line torch's warning named, with its count per counted run (the counting window's batches).
    <BLANKLINE>
    - mlp, a: `x.py:3` 4.0, `y.py:9` 0.5
    """
    found: List[str] = []
    for (workload, system), runs in report.runs.items():
        totals: Dict[str, int] = {}
        for run in runs:
            for site, n in (run.get("sync_sites") or {}).items():
                totals[site] = totals.get(site, 0) + n
        if totals:
            ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
            sites = ", ".join(f"`{site}` {n / len(runs):.1f}" for site, n in ranked)
            found.append(f"- {workload}, {system}: {sites}")
    if not found:
        return []
    return [
        "",
        "## Where the synchronisations were made",
        "",
        "Each source line torch's warning named, with its count per counted run (the counting "
        "window's batches).",
        "",
        *found,
    ]


def profiled_lines(report: Report) -> List[str]:
    """A warning above the table when torch's profiler watched the timed windows
    (``BENCH_CUDA_PROFILE``): their times are then the profiler's too."""
    if not any(run.get("profiled") for runs in report.runs.values() for run in runs):
        return []
    return [
        "**Profiled** (`BENCH_CUDA_PROFILE`): torch's profiler recorded the timed windows, so "
        "the times below include its own cost; read the profiles, not the times.",
        "",
    ]
