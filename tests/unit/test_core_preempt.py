"""SIGTERM/SIGINT to a Core API loop: ``should_preempt()`` turns True, the loop checkpoints and
returns, and leaving ``core.init()``'s block exits with status 75 (errors.TrialPreempted), as
``Trainer.fit()`` does. Determined's local mode never preempts; under its master the same loop
stops this way when the trial is paused. A loop that never asks, and a second signal, keep the
signal's previous action. Each case runs in a process of its own: the signals are real."""

import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import List

import pytest

LOOP = """
import json, os, pathlib, signal, sys
import det_lightning as det

plan = json.loads(sys.argv[1])  # {"signal": step, "second": step, "ask_from": step, ...}
out = pathlib.Path(sys.argv[2])
log = []
with det.core.init(checkpoint_storage=str(out / "checkpoints")) as ctx:
    before = signal.getsignal(signal.SIGTERM)
    for step in range(1, 11):
        log.append(step)
        for key in ("signal", "second"):
            if plan.get(key) == step:
                os.kill(os.getpid(), getattr(signal, plan.get("name", "SIGTERM")))
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
            (path / "state.txt").write_text(str(step))
        if step >= plan.get("ask_from", 1) and ctx.preempt.should_preempt():
            log.append("preempted")
            break
        (out / "log.json").write_text(json.dumps(log))
    (out / "log.json").write_text(json.dumps(log))
(out / "after.json").write_text(json.dumps({
    "restored": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    "installed": before != signal.SIG_DFL,
}))
"""


def _loop(tmp_path: pathlib.Path, **plan: object) -> "subprocess.CompletedProcess[str]":
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_LIGHTNING_SEARCH")}
    return subprocess.run(
        [sys.executable, "-c", LOOP, json.dumps(plan), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )


def _log(tmp_path: pathlib.Path) -> List[object]:
    return json.loads((tmp_path / "log.json").read_text())


def test_sigterm_makes_should_preempt_true_and_the_block_exits_75(tmp_path: pathlib.Path) -> None:
    result = _loop(tmp_path, signal=3)
    assert result.returncode == 75, result.stderr
    assert _log(tmp_path) == [1, 2, 3, "preempted"]  # it stopped at the step the signal came
    assert not (tmp_path / "after.json").exists()  # leaving the block ended the process
    stored = [p for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith(".")]
    newest = max(stored, key=lambda p: int((p / "state.txt").read_text()))
    assert (newest / "state.txt").read_text() == "3"
    assert "SIGTERM received: should_preempt() is True from its next call" in result.stderr
    assert (
        f"Stopped by SIGTERM: the loop returned at should_preempt(). The last checkpoint is "
        f"{newest}. Exiting with status 75. To continue, restore it when the loop starts again"
    ) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_sigint_stops_the_same_way(tmp_path: pathlib.Path) -> None:
    result = _loop(tmp_path, signal=2, name="SIGINT")
    assert result.returncode == 75, result.stderr
    assert _log(tmp_path) == [1, 2, "preempted"]
    assert "Stopped by SIGINT" in result.stderr


def test_a_loop_that_never_asked_ends_at_the_signal_as_before(tmp_path: pathlib.Path) -> None:
    """No should_preempt() call yet: nothing would act on the signal, so it does what it did
    before (SIGTERM's default: the process ends at once)."""
    result = _loop(tmp_path, signal=3, ask_from=5)
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert _log(tmp_path) == [1, 2]  # step 3's log line was never written


def test_sigint_before_the_loop_asked_is_a_keyboard_interrupt(tmp_path: pathlib.Path) -> None:
    result = _loop(tmp_path, signal=3, ask_from=5, name="SIGINT")
    # Python ends on an uncaught KeyboardInterrupt by SIGINT's default action.
    assert result.returncode == -signal.SIGINT, result.stderr
    assert result.stderr.rstrip().endswith("KeyboardInterrupt"), result.stderr
    assert _log(tmp_path) == [1, 2]


def test_a_second_signal_ends_the_process_at_once(tmp_path: pathlib.Path) -> None:
    result = _loop(tmp_path, signal=3, second=3)
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert _log(tmp_path) == [1, 2]


def test_handlers_are_installed_inside_the_block_only(tmp_path: pathlib.Path) -> None:
    result = _loop(tmp_path)
    assert result.returncode == 0, result.stderr
    assert _log(tmp_path) == list(range(1, 11))
    assert json.loads((tmp_path / "after.json").read_text()) == {
        "restored": True,
        "installed": True,
    }


@pytest.mark.parametrize("mode", ["WorkersAskChief", "ChiefOnly", "WorkersAskMaster"])
def test_a_signal_reaches_should_preempt_in_every_preempt_mode(
    tmp_path: pathlib.Path, mode: str
) -> None:
    """One process (the chief) in each mode; the modes differ in who asks, tested under
    torchrun in tests/distributed/test_core_api.py."""
    script = LOOP.replace(
        'det.core.init(checkpoint_storage=str(out / "checkpoints"))',
        'det.core.init(checkpoint_storage=str(out / "checkpoints"), '
        f"preempt_mode=det.core.PreemptMode.{mode})",
    )
    assert script != LOOP
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps({"signal": 4}), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 75, result.stderr
    assert _log(tmp_path) == [1, 2, 3, 4, "preempted"]
