"""``det_lightning.pytorch.experimental`` on its own: a job outside any experiment (where
Determined raised "torch_batch_process only runs on-cluster"), the reducers' state carried
across a resume with another number of processes, and the errors that name their fix.
Against Determined's own: ``tests/compat/test_torch_batch_process_parity.py``; two ranks,
SIGTERM and resume in an experiment: ``tests/distributed/test_torch_batch_process.py``."""

import json
import logging
import pathlib
from typing import Any, List

import pytest
import torch

from det_lightning import errors
from det_lightning.pytorch import MetricReducer
from det_lightning.pytorch._reducer import ReducerRegistry
from det_lightning.pytorch.experimental import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    torch_batch_process,
)
from det_lightning.pytorch.experimental._torch_batch_process import _Carried
from tests.fixtures.batch_metrics import record_reports


class Total(MetricReducer):
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0

    def update(self, value: int) -> None:
        self.total += value

    def per_slot_reduce(self) -> int:
        return self.total

    def cross_slot_reduce(self, per_slot_metrics: List[int]) -> int:
        return sum(per_slot_metrics)


def _registry() -> ReducerRegistry:
    registry = ReducerRegistry()
    registry.wrap_reducer(Total(), name="total")
    registry.wrap_reducer(lambda values: sorted(values), name="values")
    return registry


def test_reducers_carried_from_two_processes_into_one() -> None:
    """A checkpoint two processes wrote, resumed by one: the earlier slots join this run's
    as extra slots, so the metrics still cover every batch."""
    before = _Carried(_registry(), size=2, rank=0)
    saved = before.snapshot([[3, [1, 2]], [4, [5]]])
    after = _Carried(_registry(), size=1, rank=0)
    after.restore(saved)
    assert after.metrics([[10, [7]]]) == {"total": 17, "values": [1, 2, 5, 7]}
    # ... and its own checkpoint keeps them, for a resume after that.
    again = _Carried(_registry(), size=1, rank=0)
    again.restore(after.snapshot([[10, [7]]]))
    wrapped = again.registry.wrapped
    assert wrapped[1].reducer.values == [7]  # type: ignore[attr-defined]  # put back in place
    # One more batch (1, then 8): Total starts at 0 again (a MetricReducer's state cannot be
    # put back), the function reducer's values go on from [7].
    assert again.metrics([[1, [7, 8]]]) == {"total": 18, "values": [1, 2, 5, 7, 8]}


def test_reducers_that_changed_since_the_checkpoint_are_not_carried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    saved = _Carried(_registry(), size=1, rank=0).snapshot([[3, [1]]])
    registry = ReducerRegistry()
    registry.wrap_reducer(Total(), name="sum")
    carried = _Carried(registry, size=1, rank=0)
    with caplog.at_level(logging.WARNING, logger="det_lightning.pytorch"):
        carried.restore(saved)
    assert carried.metrics([[5]]) == {"sum": 5}
    assert "cover only the batches from here on" in caplog.text


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i * i)


class Recorder(TorchBatchProcessor):
    seen: List[Any] = []

    def __init__(self, context: TorchBatchProcessorContext) -> None:
        self.context = context
        self.total = context.wrap_reducer(Total(), name="total")

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        Recorder.seen.append((batch_idx, batch.tolist()))
        self.total.update(int(batch.sum()))
        with self.context.upload_path() as path:
            (path / f"{batch_idx}.json").write_text(json.dumps(batch.tolist()))


def test_a_job_outside_an_experiment_runs_and_checkpoints(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    Recorder.seen = []
    torch_batch_process(Recorder, Squares(), batch_size=3, checkpoint_interval=3)
    assert Recorder.seen == [(0, [0, 1, 4]), (1, [9, 16, 25]), (2, [36, 49, 64]), (3, [81])]
    folders = [p for p in checkpoint_dir.iterdir() if p.is_dir()]
    metadata = [
        json.loads((p / "metadata.json").read_text())
        for p in folders
        if (p / "metadata.json").exists()
    ]
    assert sorted(m["steps_completed"] for m in metadata) == [3, 4]
    (outputs,) = {m["default_output_uuid"] for m in metadata}
    assert sorted(p.name for p in (checkpoint_dir / outputs / "rank_0").iterdir()) == [
        "0.json",
        "1.json",
        "2.json",
        "3.json",
    ]


class NeedsHparams(TorchBatchProcessor):
    def __init__(self, context: TorchBatchProcessorContext) -> None:
        context.get_hparams()

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        pass


def test_hparams_outside_an_experiment_say_where_they_come_from(isolated_run: pathlib.Path) -> None:
    with pytest.raises(RuntimeError, match="det-lightning experiment"):
        torch_batch_process(NeedsHparams, Squares())


class AsksTheRegistry(TorchBatchProcessor):
    def __init__(self, context: TorchBatchProcessorContext) -> None:
        context.report_task_using_checkpoint(None)
        context.report_task_using_model_version(None)

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        pass


def test_linking_to_the_model_registry_records_nothing_and_says_so_once(
    isolated_run: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As in Determined's local mode (``DummyExperimentalCoreContext``) the job goes on; the
    log says once that nothing was recorded."""
    with caplog.at_level(logging.WARNING, logger="det_lightning.core"):
        torch_batch_process(AsksTheRegistry, Squares())
    assert caplog.text.count("nothing is recorded") == 1
    assert "core_context.train.report_metrics()" in caplog.text


def test_a_processor_without_process_batch_cannot_be_made() -> None:
    class Incomplete(TorchBatchProcessor):
        def __init__(self, context: TorchBatchProcessorContext) -> None:
            pass

    with pytest.raises(TypeError, match="process_batch"):
        Incomplete(None)  # type: ignore[abstract, arg-type]


def test_resuming_from_another_jobs_checkpoint_is_refused(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial's latest checkpoint that a training loop wrote (no default_output_uuid): the
    error says so, where Determined raised a bare KeyError."""
    from det_lightning import core
    from det_lightning._info import ClusterInfo, TrialInfo
    from det_lightning.pytorch.experimental import _torch_batch_process as module

    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 3}) as (_, storage_id):
            pass
    info = ClusterInfo(TrialInfo(1, 1, {}, {}), latest_checkpoint=storage_id)
    monkeypatch.setattr(module, "get_cluster_info", lambda: info)
    Recorder.seen = []
    with pytest.raises(errors.InvalidCheckpointException, match="not written by torch_batch"):
        torch_batch_process(Recorder, Squares())
    assert Recorder.seen == []


class StopsAt(TorchBatchProcessor):
    """Sends this process a SIGTERM during batch ``stop_at`` (a scheduler's preemption)."""

    seen: List[Any] = []
    stop_at = -1

    def __init__(self, context: TorchBatchProcessorContext) -> None:
        self.context = context
        self.total = context.wrap_reducer(Total(), name="total")

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        StopsAt.seen.append(batch_idx)
        self.total.update(int(batch.sum()))
        if batch_idx == StopsAt.stop_at:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGTERM)


def test_a_plain_run_stopped_by_sigterm_resumes_its_own_job_when_asked(
    isolated_run: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside an experiment the job stops at the checkpoint after the signal and says how
    to go on; run again with ``DET_LIGHTNING_LATEST_CHECKPOINT=latest`` it resumes from its
    own newest checkpoint, passing over newer ones another job (another batch size) wrote in
    the same storage, and its metric covers every batch."""
    from det_lightning._env import LATEST_CHECKPOINT_ENV

    reported = record_reports(monkeypatch)
    StopsAt.seen, StopsAt.stop_at = [], 1
    with pytest.raises(errors.TrialPreempted) as stopped:
        torch_batch_process(StopsAt, Squares(), batch_size=2, checkpoint_interval=2)
    assert StopsAt.seen == [0, 1]  # stopped at the checkpoint after batch 1
    assert f"{LATEST_CHECKPOINT_ENV}=latest" in str(stopped.value)

    StopsAt.seen, StopsAt.stop_at = [], -1  # another job, newer, in the same storage
    torch_batch_process(StopsAt, Squares(), batch_size=1, checkpoint_interval=3)
    assert StopsAt.seen == list(range(10))  # its newest checkpoint: 10 batches

    StopsAt.seen, reported[:] = [], []
    monkeypatch.setenv(LATEST_CHECKPOINT_ENV, "latest")
    with caplog.at_level(logging.INFO, logger="det_lightning.pytorch"):
        torch_batch_process(StopsAt, Squares(), batch_size=2, checkpoint_interval=2)
    assert StopsAt.seen == [2, 3, 4]
    assert reported == [(5, {"total": sum(i * i for i in range(10))})]
    assert "this job's newest checkpoint" in caplog.text


SCRIPT = """
from det_lightning.pytorch.experimental import TorchBatchProcessor, torch_batch_process

class Job(TorchBatchProcessor):  # the same name in both scripts: __main__.Job
    def __init__(self, context):
        pass

    def process_batch(self, batch, batch_idx):
        print("batch", batch_idx, flush=True)

torch_batch_process(Job, list(range(8)), batch_size=2, checkpoint_interval=2)
"""


def test_two_scripts_whose_processors_share_a_name_are_two_jobs(
    isolated_run: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``__main__.Job`` in ``first.py`` and in ``second.py``, over datasets of one length with
    one batch size, in one storage: resuming ``second.py`` with ``latest`` does not take the
    checkpoint ``first.py`` wrote (it would skip every batch), and the log says what it
    passed over and how to take it anyway."""
    import subprocess
    import sys

    from det_lightning._env import LATEST_CHECKPOINT_ENV

    monkeypatch.setenv(LATEST_CHECKPOINT_ENV, "latest")
    for name in ("first.py", "second.py"):
        (isolated_run / name).write_text(SCRIPT)

    def run(name: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, name], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return done

    assert run("first.py").stdout.split("\n").count("batch 3") == 1  # all 4 batches
    second = run("second.py")
    assert [line for line in second.stdout.splitlines() if line.startswith("batch")] == [
        f"batch {i}" for i in range(4)
    ]
    assert "Passed over 2 checkpoints of other jobs" in second.stderr  # first.py's
    assert run("first.py").stdout.strip() == ""  # its own job is done: nothing left
