"""``core_context.profiler``: Determined's ``on()``/``off()`` sample the machine's metrics into
the run's TensorBoard directory (Determined's local mode did nothing; scripts that call it
must not fail). Its argument checks against Determined's own:
``tests/compat/test_core_profiler_parity.py``."""

import pathlib
import time
from typing import Dict, List

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from det_lightning import core
from det_lightning.core import DistributedContext, DummyProfilerContext, ProfilerContext


def _scalars(run: pathlib.Path) -> Dict[str, List[float]]:
    found: Dict[str, List[float]] = {}
    for events in run.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            found.setdefault(tag, []).extend(e.value for e in acc.Scalars(tag))
    return found


def test_on_writes_system_metrics_until_off(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_LIGHTNING_TENSORBOARD_DIR", str(tmp_path / "tb"))
    with core.init(checkpoint_storage=str(tmp_path / "ckpt")) as ctx:
        run = ctx.train.get_tensorboard_path()
        ctx.profiler.on(sampling_interval=0.1, samples_per_report=2)
        ctx.profiler.on()  # already on: nothing changes
        deadline = time.monotonic() + 60
        while not _scalars(run).get("system/cpu/cpu_util_simple"):
            assert time.monotonic() < deadline, "no system metrics written"
            time.sleep(0.1)
        ctx.profiler.off()
        ctx.profiler.off()  # already off
        written = _scalars(run)
        time.sleep(0.3)
        assert _scalars(run) == written  # nothing after off()
    assert {"system/memory/memory_free", "system/disk/disk_throughput_read"} <= set(written)
    assert all(v >= 0 for values in written.values() for v in values)


def test_a_profiler_left_on_stops_with_the_context(tmp_path: pathlib.Path) -> None:
    with core.init(checkpoint_storage=str(tmp_path / "ckpt")) as ctx:
        ctx.profiler.on(sampling_interval=0.1)
        thread = ctx.profiler._thread
        assert thread is not None and thread.is_alive()
    assert not thread.is_alive()


def test_only_the_chief_samples(tmp_path: pathlib.Path) -> None:
    worker = DistributedContext(
        rank=1, size=2, local_rank=1, local_size=2, cross_rank=0, cross_size=1
    )
    profiler = ProfilerContext(worker, tmp_path)
    profiler.on(sampling_interval=0.1)
    assert profiler._thread is None
    profiler.off()


def test_the_dummy_does_nothing_as_determineds() -> None:
    dummy = DummyProfilerContext()
    dummy.on(sampling_interval=0.01, samples_per_report=0)  # not even checked, as there
    dummy.off()
    assert dummy._thread is None
