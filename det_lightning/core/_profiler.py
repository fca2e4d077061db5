"""``core.ProfilerContext``: Determined's system-metrics profiler, locally.

Determined's ``core_context.profiler.on()`` sampled the machine's CPU, memory, disk, network
and GPUs on a thread and sent averages to the master; its local mode's
``DummyProfilerContext`` did nothing. Here, while on, the chief samples the same groups every
``sampling_interval`` seconds and writes the average of every ``samples_per_report`` samples
to TensorBoard in the run's directory (``core_context.train.get_tensorboard_path()``), as
``system/<group>/<metric>`` scalars numbered by report. ``SystemSampler`` also serves
``fit(profiling_enabled=True)`` (``adapters/profiler.py``).
"""

import logging
import pathlib
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import torch

from det_lightning.core._distributed import DistributedContext, DummyDistributedContext

logger = logging.getLogger("det_lightning.core")


class SystemSampler:
    """One sample of Determined's system metric groups, as ``system/<group>/<metric>``.

    Uses ``psutil`` when installed (CPU, memory, disk, network) and torch for GPUs.

    Args:
        warn: told once when psutil is missing.
    """

    def __init__(self, warn: Callable[[str], None] = logger.warning) -> None:
        try:
            import psutil
        except ImportError:
            psutil = None
            warn(
                "psutil is not installed, so system metrics hold GPU memory only. `pip install "
                "psutil` for CPU, memory, disk and network."
            )
        self._psutil: Any = psutil
        self._last: Optional[Dict[str, Any]] = None

    def sample(self) -> Dict[str, float]:
        """The metrics now; throughputs are since the previous sample."""
        values: Dict[str, float] = {}
        if self._psutil is not None:
            values.update(self._host())
        values.update(_gpus())
        return values

    def _host(self) -> Dict[str, float]:
        ps = self._psutil
        now = {"time": time.monotonic(), "disk": ps.disk_io_counters(), "net": ps.net_io_counters()}
        values = {
            "system/cpu/cpu_util_simple": float(ps.cpu_percent()),
            "system/memory/memory_free": float(ps.virtual_memory().available),
        }
        last, self._last = self._last, now
        if last is None or now["disk"] is None or now["net"] is None:
            return values
        seconds = max(now["time"] - last["time"], 1e-9)
        disk, old_disk, net, old_net = now["disk"], last["disk"], now["net"], last["net"]
        values.update(
            {
                "system/disk/disk_throughput_read": disk.read_bytes - old_disk.read_bytes,
                "system/disk/disk_throughput_write": disk.write_bytes - old_disk.write_bytes,
                "system/network/net_throughput_sent": net.bytes_sent - old_net.bytes_sent,
                "system/network/net_throughput_recv": net.bytes_recv - old_net.bytes_recv,
            }
        )
        for name in [n for n in values if "throughput" in n]:
            values[name] /= seconds  # bytes per second
        return values


def _gpus() -> Dict[str, float]:
    values: Dict[str, float] = {}
    if not torch.cuda.is_available():
        return values
    for index in range(torch.cuda.device_count()):
        free, _ = torch.cuda.mem_get_info(index)
        values[f"system/gpu/{index}/gpu_free_memory"] = float(free)
        try:
            values[f"system/gpu/{index}/gpu_util"] = float(torch.cuda.utilization(index))
        except Exception:  # noqa: BLE001 - needs pynvml; the free memory is still worth having
            pass
    return values


def mean_by_name(samples: List[Dict[str, float]]) -> Dict[str, float]:
    """Each metric's mean over the samples that have it."""
    sums: Dict[str, List[float]] = {}
    for sample in samples:
        for name, value in sample.items():
            sums.setdefault(name, []).append(value)
    return {name: sum(v) / len(v) for name, v in sums.items()}


class ProfilerContext:
    """Samples system metrics while on, on the chief, into TensorBoard (see the module).

    Args:
        dist: this process's rank information.
        tensorboard_path: the run's TensorBoard directory.
    """

    def __init__(self, dist: DistributedContext, tensorboard_path: pathlib.Path) -> None:
        self._distributed = dist
        self._tensorboard_path = tensorboard_path
        self._on = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def on(self, sampling_interval: int = 1, samples_per_report: int = 10) -> None:
        """Starts sampling (idempotent), every ``sampling_interval`` seconds, writing the mean
        of every ``samples_per_report`` samples.

        Raises:
            ValueError: an interval under 0.1 s, or a count that is not a positive int (as
                Determined).
        """
        if self._on:
            return
        if sampling_interval < 0.1:
            raise ValueError(f"Sampling interval must be > 0.1, got {sampling_interval}.")
        if not isinstance(samples_per_report, int) or samples_per_report < 1:
            raise ValueError(
                f"Samples per report specifies the number of samples to aggregate before "
                f"reporting the metric. It must be an int > 1, but was specified as "
                f"{samples_per_report}."
            )
        if self._distributed.rank != 0:  # the chief writes the run's TensorBoard files
            return
        logger.info(f"Starting system metrics profiling into {self._tensorboard_path}.")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._collect,
            args=(float(sampling_interval), samples_per_report),
            name="det-lightning-system-metrics",
            daemon=True,
        )
        self._thread.start()
        self._on = True

    def off(self) -> None:
        """Stops sampling (idempotent); what was sampled since the last report is written."""
        if not self._on:
            return
        logger.info("Stopping system metrics profiling.")
        self._close()
        self._on = False

    def _close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _collect(self, interval: float, per_report: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        sampler = SystemSampler()
        writer = SummaryWriter(log_dir=str(self._tensorboard_path))
        samples: List[Dict[str, float]] = []
        reports = 0

        def report() -> None:
            nonlocal reports
            reports += 1
            for name, value in mean_by_name(samples).items():
                writer.add_scalar(name, value, reports)
            writer.flush()
            samples.clear()

        try:
            sampler.sample()  # the throughputs' starting counters
            while not self._stop.wait(interval):
                samples.append(sampler.sample())
                if len(samples) >= per_report:
                    report()
            if samples:
                report()
        finally:
            writer.close()


class DummyProfilerContext(ProfilerContext):
    """Determined's stand-in that does nothing (``core.init()`` here gives a working one)."""

    def __init__(self) -> None:
        super().__init__(DummyDistributedContext(), pathlib.Path("."))

    def on(self, sampling_interval: int = 1, samples_per_report: int = 10) -> None:
        pass

    def off(self) -> None:
        pass

    def _close(self) -> None:
        pass
