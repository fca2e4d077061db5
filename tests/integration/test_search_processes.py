"""Each trial of a search in its own process, forked from the worker's warm template
(``det_lightning/_runner/_template.py``): nothing a trial leaves in its process reaches the
next; errors, a killed trial, a lost lease and a signal to the worker end as before."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from det_lightning._runner._lease import pid_alive, take_over
from det_lightning._runner._template import WARM_START_ENV
from tests.integration.cli_support import PROJECT, experiment_dir, output, run_cli
from tests.integration.search_support import (
    checkpoint_steps,
    journal_of,
    read_trials,
    wait_while_running,
)

pytestmark = pytest.mark.slow

STATE_MODULE = 'VALUE = "pristine"\nLEAK = []\n'

LEAKY_TRIAL = """
import json
import os
import pathlib
import signal
import sys

import leaky_state
from model_def import RegressionTrial


class LeakyTrial(RegressionTrial):
    def __init__(self, context):
        mode = context.get_hparam("mode")
        record = {"pid": os.getpid(), "mode": mode, "seen": leaky_state.VALUE,
                  "leaked": len(leaky_state.LEAK)}
        path = pathlib.Path(os.environ["TEST_RECORDS"]) / f"{mode}.json"
        path.write_text(json.dumps(record))
        leaky_state.VALUE = "mutated by " + mode  # what a trial in a public project did
        leaky_state.LEAK.append(bytearray(64 * 2**20))  # and a big object it never frees
        if mode == "boom":
            raise RuntimeError("boom from inside the trial")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        super().__init__(context)
"""

PROBE_SCRIPT = """
import sys
PRELOADED = "lightning" in sys.modules  # first: what the process had before this script

import json
import os
import pathlib

import torch

import determined as det
import train

record = {"pid": os.getpid(), "preloaded": PRELOADED, "name": __name__, "argv": sys.argv,
          "cwd": os.getcwd(), "seed": torch.initial_seed(),
          "hparams": det.get_cluster_info().trial.hparams}
out = pathlib.Path(os.environ["TEST_RECORDS"]) / f"{os.getpid()}.json"
out.write_text(json.dumps(record))
if __name__ == "__main__":
    train.main(4)
"""


def _project(tmp: pathlib.Path) -> pathlib.Path:
    project = tmp / "project"
    project.mkdir()
    for name in ("model_def.py", "data.py", "train.py", "const.yaml"):
        (project / name).write_text((PROJECT / name).read_text())
    (project / "leaky_state.py").write_text(STATE_MODULE)
    (project / "leaky_def.py").write_text(LEAKY_TRIAL)
    (project / "probe.py").write_text(PROBE_SCRIPT)
    return project


def _config(entrypoint: str, hparams: str, searcher: str) -> str:
    return (
        f"name: procs\nentrypoint: {entrypoint}\nhyperparameters:\n  global_batch_size: 8\n"
        f"  learning_rate: 0.05\n  hidden_size: 4\n{hparams}searcher:\n"
        f"  metric: validation_loss\n{searcher}min_validation_period:\n  batches: 4\n"
    )


def _records(directory: pathlib.Path) -> List[Dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def _rows(stdout: str) -> List[Tuple[str, str]]:
    """The summary's (status, hyperparameters) of each trial."""
    rows = [re.split(r"\s{2,}", line) for line in stdout.splitlines() if line[:1].isdigit()]
    return [(row[1], row[2]) for row in rows]


def test_no_state_of_one_trial_reaches_the_next_and_errors_end_as_before(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """A grid of four trials in one worker: each mutates a module global and leaks 64 MiB;
    every trial still sees the module as imported fresh, each in its own process (not the
    worker's). One raises (ERROR, its traceback in the log), one is killed with SIGKILL
    (ERROR, said so); the others complete and the search goes on."""
    project = _project(isolated_run)
    records = isolated_run / "records"
    records.mkdir()
    config = isolated_run / "grid.yaml"
    config.write_text(
        _config(
            "leaky_def:LeakyTrial",
            "  mode:\n    type: categorical\n    vals: [first, boom, kill, second]\n",
            "  name: grid\n  max_length:\n    batches: 4\n",
        )
        + "max_restarts: 0\n"  # a failed trial ends at once (restarts: test_experiment_identity)
    )
    result = run_cli(
        "experiment",
        str(config),
        str(project),
        cwd=isolated_run,
        env={"TEST_RECORDS": str(records)},
    )
    assert result.returncode == 1, output(result)  # a trial failed
    seen = _records(records)
    assert sorted(r["mode"] for r in seen) == ["boom", "first", "kill", "second"], seen
    assert all(r["seen"] == "pristine" and r["leaked"] == 0 for r in seen), seen
    workers = {t.user_attrs["pid"] for t in read_trials(journal_of(checkpoint_dir))}
    pids = {r["pid"] for r in seen}
    assert len(pids) == 4 and not pids & workers, (pids, workers)
    assert {
        mode: state
        for state, cell in _rows(result.stdout)
        for mode in ("first", "boom", "kill", "second")
        if f"mode={mode}" in cell
    } == {"first": "COMPLETED", "second": "COMPLETED", "boom": "ERROR", "kill": "ERROR"}, output(
        result
    )
    # One line each; the trial's own traceback is in its log file.
    failed = [line for line in result.stderr.splitlines() if " failed: " in line]
    assert len(failed) == 2, output(result)
    boom = "failed: RuntimeError: boom from inside the trial; the search goes on without it"
    assert any(boom in line for line in failed), output(result)
    assert 'leaky_def.py", line' not in result.stderr, output(result)
    logs = "".join(p.read_text() for p in checkpoint_dir.glob("*/trial-*/error.log"))
    assert 'leaky_def.py", line' in logs and "boom from inside the trial" in logs, logs
    assert "its process was killed by SIGKILL" in result.stderr, output(result)


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "new-interpreter"])
def test_a_command_trial_runs_as_main_in_a_fresh_process(
    isolated_run: pathlib.Path, warm: bool
) -> None:
    """A command entrypoint's script runs as ``__main__`` with its arguments, in the model
    directory, with random state of its own; forked from the warm template it finds torch and
    Lightning imported already, and without it (``$DET_LIGHTNING_WARM_START=0``) it is a new
    interpreter, which the log says once."""
    project = _project(isolated_run)
    records = isolated_run / "records"
    records.mkdir()
    config = isolated_run / "command.yaml"
    config.write_text(
        _config(
            "python3 probe.py --flag x",
            "",
            "  name: random\n  max_trials: 3\n  max_length:\n    batches: 4\n",
        )
    )
    env = {"TEST_RECORDS": str(records), **({} if warm else {WARM_START_ENV: "0"})}
    result = run_cli("experiment", str(config), str(project), cwd=isolated_run, env=env)
    assert result.returncode == 0, output(result)
    seen = _records(records)
    assert len(seen) == 3, seen
    assert all(r["preloaded"] is warm for r in seen), seen
    assert all(
        r["name"] == "__main__"
        and r["argv"][0].endswith("probe.py")
        and r["argv"][1:] == ["--flag", "x"]
        and r["cwd"] == str(project)
        for r in seen
    ), seen
    assert len({r["seed"] for r in seen}) == 3, seen  # not the template's state, repeated
    assert [state for state, _ in _rows(result.stdout)] == ["COMPLETED"] * 3, output(result)
    note = "each trial starts as a new Python interpreter"
    assert result.stderr.count(note) == (0 if warm else 1), output(result)


HELD_ONCE = """
import os
import pathlib
import time

from model_def import RegressionTrial


class HeldOnce(RegressionTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        marker = pathlib.Path(os.environ["TEST_HOLD_MARKER"])
        if batch_idx == 3 and not marker.exists():
            partial = marker.with_suffix(".partial")
            partial.write_text(str(os.getpid()))
            partial.rename(marker)
            while True:  # until this process is killed
                time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def test_a_lost_lease_kills_the_trials_process_at_once(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """Another worker takes the trial over (here: the test, as that worker) while the trial's
    process is held at batch 3: the worker notices at its next renewal, kills the trial's
    process (it would never stop by itself) and goes on; the continuation finishes the
    trial."""
    project = _project(isolated_run)
    (project / "held_def.py").write_text(HELD_ONCE)
    config = isolated_run / "held.yaml"
    config.write_text(
        _config(
            "held_def:HeldOnce",
            "",
            "  name: random\n  max_trials: 1\n  max_length:\n    batches: 6\n",
        )
        + "min_checkpoint_period:\n  batches: 2\n"
    )
    marker = isolated_run / "held"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "det_lightning",
            "experiment",
            "--heartbeat-timeout",
            "2",
            str(config),
            str(project),
        ],
        cwd=isolated_run,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(os.environ, OMP_NUM_THREADS="1", TEST_HOLD_MARKER=str(marker)),
    )
    try:
        wait_while_running(marker.exists, process, "the trial to be held")
        held = int(marker.read_text())
        storage = JournalStorage(JournalFileBackend(str(journal_of(checkpoint_dir))))
        [summary] = optuna.get_all_study_summaries(storage)
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        [running] = study.get_trials(deepcopy=False)
        assert take_over(study, running) is not None
        wait_while_running(
            lambda: not pid_alive(held), process, "the held trial's process to be killed"
        )
        out = process.communicate(timeout=240)[0]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, out
    assert "another worker took it over" in out, out
    assert "resumed from its latest checkpoint" in out, out  # the continuation ran here


def test_sigterm_to_the_worker_alone_reaches_its_trial_once(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """SIGTERM to the worker's pid (not its process group): the worker passes it on to the
    trial's process, which checkpoints and stops; the search prints its summary with the trial
    interrupted and exits with 75."""
    project = _project(isolated_run)
    (project / "slow.py").write_text(
        "import time\nfrom model_def import RegressionTrial\n\n\nclass Slow(RegressionTrial):\n"
        "    def train_batch(self, batch, epoch_idx, batch_idx):\n        time.sleep(0.3)\n"
        "        return super().train_batch(batch, epoch_idx, batch_idx)\n"
    )
    config = isolated_run / "slow.yaml"
    config.write_text(
        _config(
            "slow:Slow", "", "  name: random\n  max_trials: 2\n  max_length:\n    batches: 200\n"
        )
        + "min_checkpoint_period:\n  batches: 2\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "det_lightning", "experiment", str(config), str(project)],
        cwd=isolated_run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    trial_dir = experiment_dir(checkpoint_dir, config) / "trial-1"
    try:
        wait_while_running(
            lambda: (
                trial_dir.is_dir() and any(not p.name.startswith(".") for p in trial_dir.iterdir())
            ),
            process,
            "the first checkpoint",
        )
        os.kill(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    result = f"exit status {process.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert process.returncode == 75, result
    assert [state for state, _ in _rows(out)] == ["INTERRUPTED"], result
    newest = max(checkpoint_steps(p) for p in trial_dir.iterdir() if not p.name.startswith("."))
    assert 2 <= newest < 200, result  # stopped with a checkpoint, long before its end
