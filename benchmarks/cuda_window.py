"""What ``run.py --device cuda`` measures on the device, and the device it ran on.

Never run on a GPU yet (written 2026-11-24 on a CPU-only machine; no GPU was lent to that
session): the CPU paths around it are tested, this module's CUDA calls are not. Read the first
results with that in mind.

One training fit of ``steps`` batches is cut into three windows by ``CudaWindow``, so that no
measurement disturbs another and none adds a host-device synchronisation to the steps it times:

    steps [0, count_from)          warm-up: CUDA context, cuDNN autotuning, the allocator's pool
    steps [count_from, time_from)  synchronisations counted, and peak memory from here on
    steps [time_from, steps)       timed: torch.cuda.synchronize() once before its first step
                                   starts and once after its last step ends, never in between

Synchronisations are counted with ``torch.cuda.set_sync_debug_mode("warn")``: torch then warns
at each operation of its own that makes the host wait for the device (``.item()``, a copy to or
from pageable host memory, ``nonzero``, ``torch.cuda.synchronize`` excepted). The mode adds no
synchronisation of its own (a flag checked where torch would synchronise anyway), and it is the
check ``tests/gpu/test_cuda.py`` already relies on. The profiler was the alternative (counting
``cudaStreamSynchronize``/``cudaDeviceSynchronize``/``cudaEventSynchronize``/``cudaMemcpy`` runtime
calls), but it flushes its buffers with a synchronisation of its own and changes the timing of
what it watches; the debug mode misses only synchronisations made outside torch (none of the
systems measured makes CUDA calls of its own). The count covers whole batches: the trial's step
and everything the framework does until the next one starts (batch transfer, metric reporting).

Only torch's own sync warning is counted (``SYNC_WARNING``, word for word): the first GPU run
(an H100, 2026-11-26) counted 0.077 per batch (one in 13 batches) in a loop that makes none,
because any warning whose text held "synchroniz" was counted, and torch has others that say the
word without synchronising (autograd's once-per-process AccumulateGrad stream notice is one).
The device is drained before the counting starts, so that nothing queued by the warm-up is
waited for inside the window, and where each counted warning came from is kept in the result
(``sync_sites``) so that a count above zero names its code.

``BENCH_CUDA_PROFILE=DIR`` (to find where a cost comes from, not to measure it): torch's profiler
records the timed window, host and device, and writes its table of operations, CUDA runtime
calls among them, sorted by their own host time, to ``DIR/<system>-<workload>-<pid>.txt``. The
profiler slows what it watches: such a run's times are not measurements (``"profiled"`` in the
result says so).
"""

import collections
import json
import os
import pathlib
import subprocess
import sys
import time
import warnings
from typing import Any, Dict, Iterable, List, Optional

# What ``c10::cuda::warn_or_error_on_sync`` warns in sync debug mode "warn".
SYNC_WARNING = "called a synchronizing CUDA operation"

NO_CUDA = (
    "benchmarks/run.py: --device cuda, but no CUDA device is visible to torch {torch} "
    "(torch.cuda.is_available() is False); run it on a machine with an NVIDIA GPU and a CUDA "
    "build of torch (scripts/gpu-check.sh), or measure the CPU with --device cpu."
)


def sync_sites(caught: Iterable[warnings.WarningMessage]) -> Dict[str, int]:
    """The synchronisations among ``caught`` warnings, counted by the line that made them.

    >>> import warnings as w
    >>> sync = w.WarningMessage(SYNC_WARNING + " (x)", UserWarning, "loop.py", 7)
    >>> other = w.WarningMessage("may incur unnecessary synchronization", UserWarning, "a.py", 1)
    >>> sync_sites([sync, other, sync])
    {'loop.py:7': 2}
    """
    return dict(
        collections.Counter(
            f"{w.filename}:{w.lineno}" for w in caught if str(w.message).startswith(SYNC_WARNING)
        )
    )


def missing_cuda() -> Optional[str]:
    """None when torch sees a CUDA device; else the one-line message ``run.py`` exits with."""
    import torch

    if torch.cuda.is_available():
        return None
    return NO_CUDA.format(torch=torch.__version__)


class CudaWindow:
    """The warm-up, counting and timed windows of one fit of ``steps`` batches (module doc).

    The owner calls ``at_start(i)`` as batch ``i`` (0-based) starts and ``at_end(i)`` as it ends.

    >>> w = CudaWindow(300)
    >>> (w.count_from, w.time_from, w.last)
    (30, 80, 299)
    >>> w = CudaWindow(6)
    >>> (w.count_from, w.time_from, w.last)
    (1, 2, 5)
    """

    def __init__(self, steps: int) -> None:
        if steps < 3:
            raise ValueError(f"CudaWindow(steps={steps}): needs at least 3 batches to measure")
        self.count_from = max(1, steps // 10)
        self.time_from = self.count_from + max(1, min(50, (steps - self.count_from) // 4))
        self.last = steps - 1
        self.syncs: Optional[int] = None
        self.started: Optional[float] = None
        self.ended: Optional[float] = None
        self.peak_bytes: Optional[int] = None
        self._catching: Any = None
        self._caught: List[warnings.WarningMessage] = []
        self.sites: Dict[str, int] = {}
        self.profile_dir = os.environ.get(PROFILE_ENV) or None
        self._profiler: Any = None

    def at_start(self, i: int) -> None:
        import torch

        if i == self.count_from:
            torch.cuda.synchronize()  # the warm-up's queued work is not waited for in the window
            torch.cuda.reset_peak_memory_stats()
            self._catching = warnings.catch_warnings(record=True)
            self._caught = self._catching.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        if i == self.time_from:
            torch.cuda.set_sync_debug_mode("default")
            self._catching.__exit__(None, None, None)
            self.sites = sync_sites(self._caught)
            self.syncs = sum(self.sites.values())
            torch.cuda.synchronize()  # what was queued before the window is not timed in it
            if self.profile_dir:
                self._profiler = start_profiler()
            self.started = time.perf_counter()

    def at_end(self, i: int) -> None:
        import torch

        if i == self.last:
            torch.cuda.synchronize()  # the window's last kernels are done
            self.ended = time.perf_counter()
            self.peak_bytes = torch.cuda.max_memory_allocated()
            if self._profiler is not None:
                self._profiler.__exit__(None, None, None)
                write_profile(self._profiler, self.profile_dir, self.last + 1 - self.time_from)

    def result(self) -> Dict[str, Any]:
        """What ``common.step_result`` adds for a CUDA fit."""
        if self.started is None or self.ended is None or self.syncs is None:
            raise RuntimeError("the fit ended before its CUDA measurement window did")
        return {
            "device_per_step_s": (self.ended - self.started) / (self.last + 1 - self.time_from),
            "syncs_per_batch": self.syncs / (self.time_from - self.count_from),
            "batches_counted": self.time_from - self.count_from,
            "batches_timed": self.last + 1 - self.time_from,
            "peak_memory_mb": (self.peak_bytes or 0) / 2**20,
            "sync_sites": self.sites,
            **({"profiled": True} if self.profile_dir else {}),
        }


PROFILE_ENV = "BENCH_CUDA_PROFILE"


def start_profiler() -> Any:
    """torch's profiler, recording host and (where there is one) CUDA activity from now on."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    profiler = profile(activities=activities)
    profiler.__enter__()
    return profiler


def write_profile(profiler: Any, directory: str, steps: int = 1) -> pathlib.Path:
    """The profiler's table (60 rows by own host time) as ``<system>-<workload>-<pid>.txt`` in
    ``directory``, and beside it ``.json``: every operation's calls and times per timed step
    (``steps``), which ``benchmarks/profile_diff.py`` compares between systems. The worker's
    command line names the system and workload."""
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    name = "-".join([*args[:2], str(os.getpid())]).replace("/", "_")
    path = pathlib.Path(directory) / f"{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    averages = profiler.key_averages()
    table = averages.table(sort_by="self_cpu_time_total", row_limit=60)
    path.write_text(f"{' '.join(sys.argv)}\n{table}\n")
    rows = [
        {
            "name": event.key,
            "calls": event.count / steps,
            "self_cpu_us": event.self_cpu_time_total / steps,
            "cpu_us": event.cpu_time_total / steps,
            "self_device_us": getattr(event, "self_device_time_total", 0.0) / steps,
        }
        for event in averages
    ]
    system, workload = (args + ["?", "?"])[:2]
    record = {"system": system, "workload": workload, "steps": steps, "per_step": rows}
    path.with_suffix(".json").write_text(json.dumps(record, indent=1))
    return path


def describe_device() -> Dict[str, str]:
    """The device measured and its software, for the report and the results file's name."""
    import torch

    props = torch.cuda.get_device_properties(0)
    try:
        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            .stdout.splitlines()[0]
            .strip()
        )
    except (OSError, IndexError, subprocess.SubprocessError):
        driver = "unknown (nvidia-smi did not answer)"
    return {
        "name": torch.cuda.get_device_name(0),
        "capability": "sm_{}{}".format(*torch.cuda.get_device_capability(0)),
        "memory": f"{props.total_memory / 2**30:.0f} GiB",
        "driver": driver,
        "cuda": str(torch.version.cuda),
        "cudnn": str(torch.backends.cudnn.version()),
        "torch": torch.__version__,
    }
