"""A Core API loop as a search's trial, stopped and continued both ways a trial's run ends
early: SIGTERM (the loop sees ``should_preempt()``, checkpoints and returns: INTERRUPTED, exit
75) and SIGKILL of the whole search (nothing runs after it; the trial's lease lapses). Each
time, the summary shows the trial's newest checkpoint and what it holds, and rerunning the
same command resumes the trial from it (``info.latest_checkpoint``, as Determined's master
gives a paused trial), until it completes its length once."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import pytest
import yaml

from tests.fixtures import warm
from tests.fixtures.object_store import S3

pytestmark = [pytest.mark.slow]

# Determined's core_api_pytorch_mnist shape: restore from info.latest_checkpoint, report and
# checkpoint each epoch, return when should_preempt(). HOLD_AT: the epoch after whose
# checkpoint one run waits (in should_preempt()) for the test's signal, once per epoch.
SCRIPT = """
import json, os, pathlib, time
import determined as det

info = det.get_cluster_info()
hold_at = int(os.environ.get("HOLD_AT", "0"))
events = pathlib.Path(os.environ["EVENTS"])
with det.core.init() as core_context:
    epochs = 0
    if info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            epochs = json.loads((path / "state.json").read_text())["epochs"]
    with events.open("a") as out:
        out.write(json.dumps({"started_at": epochs, "pid": os.getpid()}) + "\\n")
    while epochs < 4:
        epochs += 1
        core_context.train.report_validation_metrics(
            steps_completed=epochs * 10, metrics={"test_loss": 1.0 / epochs}
        )
        with core_context.checkpoint.store_path({"steps_completed": epochs * 10}) as (path, _):
            (path / "state.json").write_text(json.dumps({"epochs": epochs}))
        if epochs == hold_at:
            (events.parent / f"held-{epochs}").write_text(str(os.getpid()))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not core_context.preempt.should_preempt():
                time.sleep(0.05)
            with events.open("a") as out:
                out.write(json.dumps({"preempted_at": epochs}) + "\\n")
            break
        if core_context.preempt.should_preempt():
            break
    with events.open("a") as out:
        out.write(json.dumps({"returned_at": epochs}) + "\\n")
"""


def _start(
    work: pathlib.Path, config: pathlib.Path, project: pathlib.Path, *extra: str, **env: str
) -> Any:
    return warm.Popen(
        [sys.executable, "-m", "det_lightning", "experiment", *extra, str(config), str(project)],
        cwd=work,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _signal_when_held(process: Any, marker: pathlib.Path, sig: int) -> str:
    deadline = time.monotonic() + 240
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise AssertionError(f"never held at {marker.name}:\n{out}\n{err}")
        time.sleep(0.05)
    os.killpg(process.pid, sig)
    out, err = process.communicate(timeout=240)
    return f"exit status {process.returncode}\nstdout:\n{out}\nstderr:\n{err}"


def _row(shown: str) -> Optional[Dict[str, str]]:
    """Trial 1's row of the last summary table in ``shown``, by column."""
    headers = re.findall(r"^trial\s{2,}.*$", shown, re.M)
    rows = re.findall(r"^1\s{2,}.*$", shown, re.M)
    if not headers or not rows:
        return None
    return dict(zip(re.split(r"\s{2,}", headers[-1]), re.split(r"\s{2,}", rows[-1])))


def _events(path: pathlib.Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("kind", ["directory", "s3"])
def test_a_core_api_trial_resumes_after_sigterm_and_after_sigkill(
    isolated_run: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    request: pytest.FixtureRequest,
    kind: str,
) -> None:
    """In a directory, and in a bucket (moto's S3 server), as a search across machines keeps
    its checkpoints."""
    extra: List[str] = []
    if kind == "s3":
        s3: S3 = request.getfixturevalue("s3_server")
        extra = ["--checkpoint-dir", s3.url("search")]

    def stored() -> Dict[str, int]:
        """The epochs each of trial 1's checkpoints holds, by storage id."""
        if kind == "directory":
            trial_dir = next(checkpoint_dir.glob("*/trial-1"))
            files = {p.parent.name: p.read_text() for p in trial_dir.glob("*/state.json")}
        else:
            keys = [k for k in s3.keys("search") if re.search(r"/trial-1/[^/]+/state\.json$", k)]
            files = {k.split("/")[-2]: s3.fs.cat(f"{s3.bucket}/search/{k}").decode() for k in keys}
        return {name: json.loads(text)["epochs"] for name, text in files.items()}

    project = isolated_run / "project"
    project.mkdir()
    (project / "model_def.py").write_text(SCRIPT)
    config = isolated_run / "core.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "core-resume",
                "entrypoint": "python3 model_def.py",
                "searcher": {
                    "name": "single",
                    "metric": "test_loss",
                    "max_length": {"batches": 40},
                },
                "max_restarts": 0,
            }
        )
    )
    events = isolated_run / "events.jsonl"

    # 1. SIGTERM while the trial waits after epoch 2: the loop returns, the search says
    #    INTERRUPTED, shows epoch 2's checkpoint (20 batches) and exits 75.
    first = _start(isolated_run, config, project, *extra, EVENTS=str(events), HOLD_AT="2")
    shown = _signal_when_held(first, isolated_run / "held-2", signal.SIGTERM)
    assert first.returncode == 75, shown
    assert "Stopped by SIGTERM: the loop returned at should_preempt()" in shown, shown
    assert "resumes this trial from its latest checkpoint" in shown, shown
    row = _row(shown)
    assert row is not None and row["status"] == "INTERRUPTED" and row["batches"] == "20", shown
    found = stored()
    (epoch_two,) = [name for name, epochs in found.items() if epochs == 2]
    assert epoch_two in row["checkpoint"], (row, found)  # the row names it
    assert _events(events)[-2:] == [{"preempted_at": 2}, {"returned_at": 2}]

    # 2. The same command again: the trial resumes at epoch 2; SIGKILL to the whole search
    #    while it waits after epoch 3. Nothing runs after a SIGKILL.
    second = _start(isolated_run, config, project, *extra, EVENTS=str(events), HOLD_AT="3")
    shown = _signal_when_held(second, isolated_run / "held-3", signal.SIGKILL)
    assert second.returncode == -signal.SIGKILL, shown
    started = [e["started_at"] for e in _events(events) if "started_at" in e]
    assert started == [0, 2], _events(events)

    # 3. Again: the killed worker's lease is gone (its process is), so the trial resumes at
    #    epoch 3, finishes its fourth epoch and completes.
    third = _start(isolated_run, config, project, *extra, EVENTS=str(events))
    out, err = third.communicate(timeout=240)
    shown = f"exit status {third.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert third.returncode == 0, shown
    assert "resumed from its latest checkpoint" in err, shown
    started = [e["started_at"] for e in _events(events) if "started_at" in e]
    assert started == [0, 2, 3], _events(events)
    assert _events(events)[-1] == {"returned_at": 4}
    row = _row(out)
    assert row is not None and row["status"] == "COMPLETED" and row["batches"] == "40", shown
    assert re.search(r"^best: trial 1 \(test_loss=0\.25\)", out, re.M), shown
    if kind == "directory":  # checkpoint list reads the files (a directory's)
        experiment = next(checkpoint_dir.glob("*/trial-1")).parent.name
        listed = subprocess.run(
            [sys.executable, "-m", "det_lightning", "checkpoint", "list", experiment],
            capture_output=True,
            text=True,
            cwd=isolated_run,
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        assert sorted(int(row[3]) for row in rows) == [10, 20, 30, 40], listed.stdout
        assert {row[2] for row in rows} == set(stored()), listed.stdout
