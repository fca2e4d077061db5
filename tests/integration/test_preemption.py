"""Preemption and crash safety: a signalled or killed run resumes to the same weights.

The oracle is the uninterrupted run: stopping at any batch (SIGTERM, SIGINT, a stop request)
or dying at any moment (kill -9, even inside a checkpoint write) and resuming from the newest
complete checkpoint must end with exactly its weights.
"""

import json
import logging
import os
import pathlib
import random
import signal
import threading
import time
from typing import Any, Dict, List, Optional

import lightning.pytorch as pl
import pytest
import torch

from det_lightning import errors, pytorch
from det_lightning._env import LATEST_CHECKPOINT_ENV
from det_lightning.adapters import preemption
from det_lightning.pytorch import _checkpoint as ckpt
from tests.distributed import jobs
from tests.fixtures.trials import make_trials, seed_everything
from tests.integration.scripts.launch import Script

HPARAMS = {"n": 48, "batch_size": 8}  # 6 batches an epoch: most stops land mid-epoch
BATCHES = 14
MLPTrial = make_trials(pytorch)["MLPTrial"]


class StopAt(MLPTrial):  # type: ignore[valid-type, misc]
    """MLPTrial that, during batch ``at``, signals its own process (or asks to stop)."""

    at: int = -1
    signum: Optional[int] = None
    shutdowns: List[str] = []

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == self.at:
            if self.signum is None:
                self.context.set_stop_requested(True)
            else:
                os.kill(os.getpid(), self.signum)
        return super().train_batch(batch, epoch_idx, batch_idx)

    def build_callbacks(self) -> Dict[str, Any]:
        trial = self

        class Shutdown(pytorch.PyTorchCallback):
            def on_trial_shutdown(self) -> None:
                trial.shutdowns.append(f"shutdown after {len(trial.seen)} batches")

        return {**super().build_callbacks(), "shutdown": Shutdown()}


def stop_at(at: int, signum: Optional[int]) -> Any:
    """A ``StopAt`` subclass for batch ``at`` (a class statement, so ``code/`` copies this
    package: ``type()`` under ABCMeta would name the ``abc`` module as the class's home)."""

    class Stopping(StopAt):
        pass

    Stopping.at, Stopping.signum, Stopping.shutdowns = at, signum, []
    # The same trial as MLPTrial, instrumented: its checkpoints are MLPTrial's to resume
    # (``latest`` only resumes the trial class that wrote a checkpoint).
    Stopping.__module__, Stopping.__qualname__ = MLPTrial.__module__, MLPTrial.__qualname__
    return Stopping


def fit(
    trial_cls: Any, checkpoint_dir: pathlib.Path, callbacks: Optional[List[Any]] = None, **kw: Any
) -> Any:
    seed_everything(3)
    with pytorch.init(hparams=dict(HPARAMS), accelerator="cpu") as context:
        trial = trial_cls(context)
        trainer = pytorch.Trainer(
            trial,
            context,
            logger=False,
            checkpoint_dir=str(checkpoint_dir),
            callbacks=callbacks or [],
        )
        trainer.fit(max_length=pytorch.Batch(BATCHES), **kw)
    return trial


def assert_same_weights(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.fixture
def straight(tmp_path: pathlib.Path) -> Dict[str, torch.Tensor]:
    """The final weights of the uninterrupted run."""
    return dict(fit(MLPTrial, tmp_path / "straight").model.state_dict())


def steps_of(checkpoint: pathlib.Path) -> int:
    return int(json.loads((checkpoint / ckpt.METADATA_FILE).read_text())["steps_completed"])


# ----- signals, in this process --------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_signal_checkpoints_after_the_batch_and_resuming_matches_the_straight_run(
    seed: int, checkpoint_dir: pathlib.Path, straight: Dict[str, torch.Tensor]
) -> None:
    rng = random.Random(seed)
    at = rng.randrange(0, BATCHES - 1)
    signum = [signal.SIGTERM, signal.SIGINT][seed % 2]
    trial_cls = stop_at(at, signum)
    with pytest.raises(errors.TrialPreempted) as stopped:
        fit(trial_cls, checkpoint_dir)
    assert stopped.value.code == errors.TrialPreempted.EXIT_CODE == 75
    # The batch the signal arrived in was finished, then checkpointed; nothing more trained.
    assert trial_cls.shutdowns == [f"shutdown after {at + 1} batches"]
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None and steps_of(latest) == at + 1
    assert stopped.value.checkpoint == str(latest)
    assert signal.Signals(signum).name in str(stopped.value)
    assert "latest_checkpoint='latest'" in str(stopped.value)

    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert len(resumed.seen) == BATCHES - at - 1
    assert_same_weights(dict(resumed.model.state_dict()), straight)


class SignalProbe(pl.Callback):
    """Records, inside Lightning's loop, who handles SIGTERM and what Lightning believes."""

    def __init__(self) -> None:
        self.handlers: List[Any] = []
        self.received_sigterm: List[bool] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.handlers.append(signal.getsignal(signal.SIGTERM))
        self.received_sigterm.append(trainer.received_sigterm)


def test_lightning_sigterm_handling_is_superseded_and_handlers_are_restored(
    checkpoint_dir: pathlib.Path,
) -> None:
    def previous(signum: int, frame: Any) -> None:
        raise AssertionError("the handler from before fit() ran during fit()")

    def previous_int(signum: int, frame: Any) -> None:
        raise AssertionError("the SIGINT handler from before fit() ran during fit()")

    # Both handlers are our own, so the test holds whatever the suite inherited (under nohup or
    # in a background job SIGINT is ignored, not Python's default_int_handler).
    old = signal.signal(signal.SIGTERM, previous)
    old_int = signal.signal(signal.SIGINT, previous_int)
    try:
        probe = SignalProbe()
        trial_cls = stop_at(2, signal.SIGTERM)
        with pytest.raises(errors.TrialPreempted):
            fit(trial_cls, checkpoint_dir, callbacks=[probe])
        assert signal.getsignal(signal.SIGTERM) is previous
        assert signal.getsignal(signal.SIGINT) is previous_int
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)
    # Ours alone (not Lightning's _HandlersCompose chaining to it), and Lightning never saw the
    # signal, so it raised no SIGTERMException mid-loop.
    assert len(probe.handlers) == 3
    assert all(
        isinstance(getattr(h, "__self__", None), preemption.SignalWatcher) for h in probe.handlers
    )
    assert probe.received_sigterm == [False, False, False]


def test_set_stop_requested_stops_after_the_batch_with_a_checkpoint(
    checkpoint_dir: pathlib.Path, straight: Dict[str, torch.Tensor]
) -> None:
    trial_cls = stop_at(4, None)
    trial = fit(trial_cls, checkpoint_dir)  # returns: the trial chose to stop
    assert len(trial.seen) == 5
    assert trial_cls.shutdowns == ["shutdown after 5 batches"]
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None and steps_of(latest) == 5
    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert_same_weights(dict(resumed.model.state_dict()), straight)


def test_no_handlers_outside_the_main_thread(checkpoint_dir: pathlib.Path) -> None:
    errors_seen: List[BaseException] = []
    before = signal.getsignal(signal.SIGTERM)

    def run() -> None:
        try:
            fit(MLPTrial, checkpoint_dir)
        except BaseException as e:  # signal.signal() would raise ValueError in this thread
            errors_seen.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive() and errors_seen == []
    assert signal.getsignal(signal.SIGTERM) is before


# ----- resuming from the environment ---------------------------------------------------------
def test_env_latest_starts_fresh_then_continues(
    checkpoint_dir: pathlib.Path,
    straight: Dict[str, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LATEST_CHECKPOINT_ENV, "latest")
    trial_cls = stop_at(6, signal.SIGTERM)
    with pytest.raises(errors.TrialPreempted):
        fit(trial_cls, checkpoint_dir)  # no checkpoint yet: the first run starts from batch 0
    resumed = fit(MLPTrial, checkpoint_dir)  # the same call, requeued
    assert len(resumed.seen) == BATCHES - 7
    assert_same_weights(dict(resumed.model.state_dict()), straight)


def test_env_names_a_checkpoint(
    checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial_cls = stop_at(2, None)
    fit(trial_cls, checkpoint_dir)
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None
    monkeypatch.setenv(LATEST_CHECKPOINT_ENV, latest.name)  # a UUID
    assert len(fit(MLPTrial, checkpoint_dir).seen) == BATCHES - 3


def test_fit_latest_on_a_first_run_starts_fresh_and_says_so(
    checkpoint_dir: pathlib.Path,
    straight: Dict[str, torch.Tensor],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="det_lightning.pytorch"):
        first = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert len(first.seen) == BATCHES
    assert "no complete checkpoint under" in caplog.text and "starting from the beginning" in (
        caplog.text
    )
    assert_same_weights(dict(first.model.state_dict()), straight)


class _Payload:
    """Unpickling this runs code: it creates the marker directory."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> Any:
        return (os.mkdir, (self.marker,))


def plant(root: pathlib.Path, marker: pathlib.Path) -> pathlib.Path:
    """A checkpoint "written by Determined" (no det_lightning_version), newer than any other,
    whose state_dict.pth runs code when fully unpickled."""
    planted = root / "00000000-planted"
    planted.mkdir(parents=True)
    torch.save({"models_state_dict": [_Payload(marker)]}, str(planted / "state_dict.pth"))
    (planted / "metadata.json").write_text(json.dumps({"steps_completed": 10_000}))
    # It claims to be this run's (MLPTrial, HPARAMS), so that `latest` considers it.
    spec = f"{MLPTrial.__module__}:{MLPTrial.__qualname__}"
    load_data = {"trial_type": "PyTorchTrial", "trial_cls_spec": spec, "hparams": HPARAMS}
    (planted / "load_data.json").write_text(json.dumps(load_data))
    return planted


@pytest.mark.parametrize("how", ["fit", "env"])
def test_a_checkpoint_found_by_scanning_is_never_unpickled(
    how: str,
    tmp_path: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "code-ran"
    plant(checkpoint_dir, marker)
    kw: Dict[str, Any] = {}
    if how == "fit":
        kw["latest_checkpoint"] = "latest"
    else:
        monkeypatch.setenv(LATEST_CHECKPOINT_ENV, "latest")
    with pytest.raises(errors.InvalidCheckpointException, match="weights_only"):
        fit(MLPTrial, checkpoint_dir, **kw)
    assert not marker.exists()


@pytest.mark.parametrize("how", ["fit", "env"])
def test_a_checkpoint_the_user_names_may_be_fully_unpickled(
    how: str,
    tmp_path: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Naming a checkpoint (a path, in fit() or the variable) is the consent that lets a real
    Determined checkpoint load; this one then fails on its content, after its code ran."""
    marker = tmp_path / "code-ran"
    planted = plant(checkpoint_dir, marker)
    kw: Dict[str, Any] = {}
    if how == "fit":
        kw["latest_checkpoint"] = str(planted)
    else:
        monkeypatch.setenv(LATEST_CHECKPOINT_ENV, str(planted))
    with pytest.raises(Exception):  # noqa: B017 - whatever the bogus state dict trips over
        fit(MLPTrial, checkpoint_dir, **kw)
    assert marker.exists()


# ----- in a process of its own -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.new_interpreters  # signal delivery and exit status of a real interpreter
def test_sigterm_exits_with_status_75_and_the_requeued_run_continues(
    tmp_path: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    straight: Dict[str, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shutdown = tmp_path / "shutdown"
    script = Script(
        tmp_path / "run", batches=BATCHES, hparams=HPARAMS, signal_at=8, shutdown=str(shutdown)
    )
    assert script.wait() == 75, script.log()
    log = script.log()
    assert "Received SIGTERM: finishing the current batch" in log
    assert "latest_checkpoint='latest'" in log and "DET_LIGHTNING_LATEST_CHECKPOINT=latest" in log
    assert "Traceback" not in log
    assert shutdown.read_text() == "shutdown"
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None and steps_of(latest) == 9

    monkeypatch.setenv(LATEST_CHECKPOINT_ENV, "latest")
    resumed = fit(MLPTrial, checkpoint_dir)
    assert len(resumed.seen) == BATCHES - 9
    assert_same_weights(dict(resumed.model.state_dict()), straight)


@pytest.mark.slow
def test_ctrl_c_with_loader_workers_still_checkpoints(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """Ctrl+C signals the whole process group, DataLoader workers included. The workers
    inherit the handler, so they keep serving batches until the main process stops them.
    (torch gives its workers a SIGTERM handler of its own: a group-wide SIGTERM kills them.)"""
    started = tmp_path / "started"
    script = Script(
        tmp_path / "run",
        new_session=True,
        batches=200,
        hparams=HPARAMS,
        workers=2,
        slow_batches=0.02,
        started=str(started),
    )
    script.wait_for_file(started)
    time.sleep(0.2)
    os.killpg(script.process.pid, signal.SIGINT)
    assert script.wait() == 75, script.log()
    log = script.log()
    assert log.count("Received SIGINT") == 1  # said once, by the main process
    assert "DataLoader worker" not in log and "KeyboardInterrupt" not in log
    latest = ckpt.latest_checkpoint(checkpoint_dir)
    assert latest is not None and 0 < steps_of(latest) < 200


@pytest.mark.slow
@pytest.mark.distributed
def test_a_signal_on_one_rank_stops_every_rank_after_the_same_batch(tmp_path: pathlib.Path) -> None:
    args = tmp_path / "args.json"
    args.write_text(
        json.dumps(
            {
                "batches": 40,
                "hparams": HPARAMS,
                "devices": 2,
                "signal_at": 5,
                "signal_rank": 1,
                "shutdown": str(tmp_path / "shutdown"),
            }
        )
    )
    job = jobs.run(
        [str(jobs.REPO / "tests/integration/scripts/train.py"), str(args)], tmp_path / "job"
    )
    assert job.returncode == 75, job.output[-6000:]
    # Rank 1 notes it at INFO (a rank other than the chief keeps those lines to itself); the
    # chief's one line says which rank received it.
    assert job.output.count("Received SIGTERM") == 0, job.output[-6000:]
    assert job.output.count("Stopped by SIGTERM (received by rank 1).") == 1, job.output[-6000:]
    (checkpoint,) = job.checkpoints()
    # Rank 1's signal at batch 5 is agreed at the next stop-agreement point (no period boundary
    # comes first here): every rank trains to batch 16 and stops there.
    from det_lightning.adapters.preemption import FIRST_AGREEMENT

    assert steps_of(checkpoint) == FIRST_AGREEMENT == 16


def _blocked_in_second_checkpoint(tmp_path: pathlib.Path) -> "tuple[Script, pathlib.Path]":
    """A run blocked while writing its second checkpoint (batch 6; the first is batch 3)."""
    marker = tmp_path / "blocked"
    script = Script(
        tmp_path / "run",
        batches=BATCHES,
        hparams=HPARAMS,
        fit={"checkpoint_period": 3},
        block_write=2,
        marker=str(marker),
    )
    script.wait_for_file(marker)
    return script, pathlib.Path(marker.read_text())


def _assert_previous_checkpoint_intact(checkpoint_dir: pathlib.Path, partial: pathlib.Path) -> None:
    assert partial.name.startswith(".") and partial.name.endswith(ckpt.PARTIAL_SUFFIX)
    assert partial.is_dir()  # the write that was cut short
    complete = [p for p in checkpoint_dir.iterdir() if not p.name.startswith(".")]
    assert len(complete) == 1 and steps_of(complete[0]) == 3
    assert ckpt.latest_checkpoint(checkpoint_dir) == complete[0]
    trial = pytorch.load_trial_from_checkpoint_path(str(complete[0]), trial_class=MLPTrial)
    assert isinstance(trial, MLPTrial)


@pytest.mark.slow
def test_a_second_signal_exits_at_once_keeping_the_last_complete_checkpoint(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    script, partial = _blocked_in_second_checkpoint(tmp_path)
    script.signal(signal.SIGTERM)
    # Handled (not merely sent: two pending SIGTERMs would arrive as one) and not ended by it.
    script.wait_for_output("Received SIGTERM: finishing the current batch")
    assert script.process.poll() is None  # the first signal waits for the batch to end
    script.signal(signal.SIGTERM)
    assert script.wait(timeout=30) == -signal.SIGTERM
    assert "Received SIGTERM again: exiting at once" in script.log()
    _assert_previous_checkpoint_intact(checkpoint_dir, partial)


@pytest.mark.slow
@pytest.mark.new_interpreters  # a SIGKILL drill on a real interpreter
def test_kill_9_during_a_checkpoint_write_loses_nothing_complete(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path, straight: Dict[str, torch.Tensor]
) -> None:
    script, partial = _blocked_in_second_checkpoint(tmp_path)
    script.signal(signal.SIGKILL)
    assert script.wait(timeout=30) == -signal.SIGKILL
    _assert_previous_checkpoint_intact(checkpoint_dir, partial)

    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert not partial.exists()  # cleaned on the next start
    assert len(resumed.seen) == BATCHES - 3
    assert_same_weights(dict(resumed.model.state_dict()), straight)


def _blocked_in_second_background_write(
    tmp_path: pathlib.Path,
) -> "tuple[Script, pathlib.Path, pathlib.Path]":
    """A run whose writer thread is held inside its second checkpoint (batch 6) while the
    training thread trains on; it goes on once the returned release file exists. Every
    checkpoint is kept."""
    marker, release = tmp_path / "blocked", tmp_path / "release"
    script = Script(
        tmp_path / "run",
        batches=BATCHES,
        hparams=HPARAMS,
        fit={"checkpoint_period": 3},
        block_background=2,
        marker=str(marker),
        release=str(release),
        exp_conf={"checkpoint_storage": {"save_trial_latest": 9, "save_trial_best": 0}},
    )
    script.wait_for_file(marker)
    return script, pathlib.Path(marker.read_text()), release


@pytest.mark.slow
def test_kill_9_during_a_background_write_loses_nothing_complete(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path, straight: Dict[str, torch.Tensor]
) -> None:
    script, partial, _ = _blocked_in_second_background_write(tmp_path)
    script.signal(signal.SIGKILL)
    assert script.wait(timeout=30) == -signal.SIGKILL
    _assert_previous_checkpoint_intact(checkpoint_dir, partial)

    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert not partial.exists()
    assert len(resumed.seen) == BATCHES - 3
    assert_same_weights(dict(resumed.model.state_dict()), straight)


@pytest.mark.slow
def test_sigterm_during_a_background_write_waits_for_it_then_resumes_exactly(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path, straight: Dict[str, torch.Tensor]
) -> None:
    script, partial, release = _blocked_in_second_background_write(tmp_path)
    script.signal(signal.SIGTERM)  # the stop's checkpoint must wait for the held write
    release.write_text("go")
    assert script.wait(timeout=120) == 75
    assert not partial.exists()
    steps = sorted(steps_of(p) for p in checkpoint_dir.iterdir() if not p.name.startswith("."))
    # The held write of batch 6 completed; the newest is the stop's (after batch 9's periodic
    # one when the signal was handled only after it: the training thread may have been waiting
    # there for the held write when the signal came).
    assert steps[:2] == [3, 6] and steps[-1] > 6
    assert not [p for p in checkpoint_dir.iterdir() if p.name.startswith(".")]

    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert len(resumed.seen) == BATCHES - steps[-1]
    assert_same_weights(dict(resumed.model.state_dict()), straight)


@pytest.mark.slow
def test_kill_9_while_retention_deletes_a_checkpoint_leaves_none_broken(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path, straight: Dict[str, torch.Tensor]
) -> None:
    marker = tmp_path / "deleting"
    script = Script(
        tmp_path / "run",
        batches=BATCHES,
        hparams=HPARAMS,
        fit={"checkpoint_period": 1},
        exp_conf={"checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0}},
        block_delete=str(marker),
    )
    script.wait_for_file(marker)  # one file of the superseded checkpoint is gone already
    script.signal(signal.SIGKILL)
    assert script.wait(timeout=30) == -signal.SIGKILL
    visible = [p for p in checkpoint_dir.iterdir() if not p.name.startswith(".")]
    assert len(visible) == 1  # the newest; the one being deleted left its name first
    files = {ckpt.STATE_DICT_FILE, ckpt.TRIAL_STATE_FILE, ckpt.LOAD_DATA_FILE, ckpt.METADATA_FILE}
    assert files <= {p.name for p in visible[0].iterdir()}
    pytorch.load_trial_from_checkpoint_path(str(visible[0]), trial_class=MLPTrial)
    (hidden,) = [p for p in checkpoint_dir.iterdir() if p.name.endswith(ckpt.DELETING_SUFFIX)]
    assert hidden == pathlib.Path(marker.read_text())
    steps = steps_of(visible[0])

    resumed = fit(MLPTrial, checkpoint_dir, latest_checkpoint="latest")
    assert not hidden.exists()  # the next run finished the deletion
    assert len(resumed.seen) == BATCHES - steps
    assert_same_weights(dict(resumed.model.state_dict()), straight)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_kill_9_at_a_random_moment_then_resume_matches_the_straight_run(
    seed: int,
    tmp_path: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    straight: Dict[str, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = tmp_path / "started"
    script = Script(
        tmp_path / "run",
        batches=BATCHES,
        hparams=HPARAMS,
        fit={"checkpoint_period": 1},
        slow_batches=0.03,
        started=str(started),
    )
    script.wait_for_file(started)
    time.sleep(random.Random(seed).uniform(0.0, 0.4))
    script.signal(signal.SIGKILL)
    assert script.wait(timeout=30) == -signal.SIGKILL  # killed mid-run, not after it ended
    monkeypatch.setenv(LATEST_CHECKPOINT_ENV, "latest")
    resumed = fit(MLPTrial, checkpoint_dir)
    assert not [p for p in checkpoint_dir.iterdir() if p.name.endswith(ckpt.PARTIAL_SUFFIX)]
    assert_same_weights(dict(resumed.model.state_dict()), straight)
