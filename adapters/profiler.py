"""Profiling a trial, three ways.

- ``context.set_profiler(**kwargs)``: a ``torch.profiler.profile(**kwargs)`` whose traces go to
  the TensorBoard directory (``context.get_tensorboard_path()``, files ``*.pt.trace.json``).
  :class:`TraceProfiler` starts it when training starts, ``TrialModule.training_step`` steps it
  after each ``train_batch``, and it stops when training ends (or fails).
- ``fit(profiling_enabled=True)`` (or the deprecated ``Trainer.configure_profiler(enabled=True)``):
  :class:`SystemMetricsMonitor` samples Determined's system metrics (CPU, memory, disk, network,
  GPU) and times each training batch; the averages go to the Lightning loggers as
  ``system/<group>/<metric>`` and ``timing/train_batch`` (seconds).
- Lightning's own profilers: ``Trainer(..., profiler="simple")`` reaches ``lightning.Trainer``.
"""

import dataclasses
import time
from typing import Any, Dict, List, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from det_lightning.adapters.lightning import internals
from det_lightning.adapters.module import TrialModule
from det_lightning.core._profiler import SystemSampler
from det_lightning.core._profiler import mean_by_name as _mean_by_name
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._result import ProfilerConfig


def build_trace_profiler(context: PyTorchTrialContext) -> Optional[torch.profiler.profile]:
    """The profiler ``context.set_profiler(...)`` asked for, writing to TensorBoard, or None.

    Raises:
        ValueError: ``on_trace_ready`` was given; the traces' destination is fixed.
    """
    requested = context.engine.profiler_args
    if requested is None:
        return None
    args, kwargs = requested
    if "on_trace_ready" in kwargs:
        raise ValueError(
            "context.set_profiler(on_trace_ready=...): the trace handler is set for you, writing "
            "to the TensorBoard directory (context.get_tensorboard_path()). Drop on_trace_ready."
        )
    handler = torch.profiler.tensorboard_trace_handler(str(context.get_tensorboard_path()))
    return torch.profiler.profile(*args, on_trace_ready=handler, **kwargs)


class TraceProfiler(Callback):
    """Runs the ``set_profiler`` profiler over training; ``training_step`` steps it.

    Args:
        module: the ``TrialModule`` (its context is read when training starts).
    """

    def __init__(self, module: TrialModule) -> None:
        self.module = module
        self.profiler: Optional[torch.profiler.profile] = None

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.profiler = build_trace_profiler(self.module.context)
        if self.profiler is None:
            # Nothing to run: leave the callback list, or Lightning would still dispatch every
            # per-batch hook to us (~3% of an MLP step). A new list, not remove(): Lightning
            # is iterating the current one.
            callbacks = trainer.callbacks  # type: ignore[attr-defined]
            trainer.callbacks = [c for c in callbacks if c is not self]  # type: ignore[attr-defined]
            return
        self.module.context.profiler = self.profiler
        self.profiler.start()
        self.module.set_trace_profiler(self.profiler)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop()

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.profiler is None:
            return
        self.module.set_trace_profiler(None)
        profiler, self.profiler = self.profiler, None
        profiler.stop()


class SystemMetricsMonitor(Callback):
    """Determined's profiler: system metrics and batch timings, logged to the Lightning loggers.

    Per batch it reads a clock twice; system metrics are sampled at most every
    ``sampling_interval`` seconds, and logged (averaged) every ``samples_per_report`` samples
    and when training ends.

    Args:
        sampling_interval: seconds between two samples of the system metrics.
        samples_per_report: samples averaged into one logged value.
        sync_timings: wait for the GPU to finish a batch before timing it.
        begin_on_batch: first batch (0-based, counted across the run) to time.
        end_after_batch: last batch to time (None: all).
    """

    def __init__(
        self,
        sampling_interval: float = 1.0,
        samples_per_report: int = 10,
        sync_timings: bool = False,
        begin_on_batch: int = 0,
        *,
        end_after_batch: Optional[int] = None,
    ) -> None:
        if sampling_interval < 0.1:
            raise ValueError(
                f"SystemMetricsMonitor(sampling_interval={sampling_interval}): expected at least "
                "0.1 seconds."
            )
        self.sampling_interval = sampling_interval
        self.samples_per_report = samples_per_report
        self.sync_timings = sync_timings
        self.begin_on_batch = begin_on_batch
        self.end_after_batch = end_after_batch
        self.sampler = SystemSampler(warn=rank_zero_warn)
        self._samples: List[Dict[str, float]] = []
        self._batch_times: List[float] = []
        self._started_at: Optional[float] = None
        self._next_sample = 0.0

    def _in_window(self, batch: int) -> bool:
        end = self.end_after_batch
        return batch >= self.begin_on_batch and (end is None or batch <= end)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._in_window(_batches_trained(pl_module, trainer)):
            self._started_at = time.perf_counter()

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._started_at is not None:
            if self.sync_timings and pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)
            self._batch_times.append(time.perf_counter() - self._started_at)
            self._started_at = None
        if not trainer.is_global_zero or time.monotonic() < self._next_sample:
            return
        self._next_sample = time.monotonic() + self.sampling_interval
        self._samples.append(self.sampler.sample())
        if len(self._samples) >= self.samples_per_report:
            self._report(trainer, _batches_trained(pl_module, trainer))

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._samples.append(self.sampler.sample())
            self._report(trainer, _batches_trained(pl_module, trainer))

    def _report(self, trainer: pl.Trainer, step: int) -> None:
        values = _mean_by_name(self._samples)
        if self._batch_times:
            values["timing/train_batch"] = sum(self._batch_times) / len(self._batch_times)
        self._samples, self._batch_times = [], []
        for lg in trainer.loggers:
            lg.log_metrics(values, step=step)


def _batches_trained(pl_module: pl.LightningModule, trainer: pl.Trainer) -> int:
    progress = getattr(pl_module, "progress", None)
    return progress.batches_trained if progress is not None else internals.batches_seen(trainer)


def profiling_callbacks(
    module: TrialModule, profiling_enabled: bool, config: Optional[ProfilerConfig]
) -> List[Callback]:
    """The profiling callbacks of one ``fit()``: ``set_profiler``'s traces, and system metrics
    when ``fit(profiling_enabled=True)`` or ``configure_profiler(enabled=True)`` asked."""
    callbacks: List[Callback] = [TraceProfiler(module)]
    if config is not None:
        callbacks.append(SystemMetricsMonitor(**dataclasses.asdict(config)))
    elif profiling_enabled:
        callbacks.append(SystemMetricsMonitor())
    return callbacks
