"""The ``det-lightning`` command's conventions that need real processes: one line per Ctrl-C
(a real SIGINT to a real process group), each line once per job with two processes, and the
warning when more processes are asked than the machine has cores."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from det_lightning._job_processes import cpu_count
from tests.integration.cli_support import PROJECT, TIMEOUT_S, output, run_cli


def _wait_for(path: pathlib.Path, text: str, process: "subprocess.Popen[str]") -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while text not in path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r}:\n{path.read_text()}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "launch",
    [
        pytest.param([], id="one-process"),
        pytest.param(
            ["--devices", "2", "--accelerator", "cpu"],
            id="two-processes",
            marks=pytest.mark.distributed,
        ),
    ],
)
def test_ctrl_c_says_so_once_and_overrides_apply(tmp_path: pathlib.Path, launch: list) -> None:
    """``--config`` lengthens the run past its file's 12 batches; one SIGINT to the process
    group (what Ctrl-C sends) stops it with one line about it, none labelled ``error:``, and no
    traceback (with two processes: torchrun's, _torchrun), leaving a checkpoint to resume."""
    err = tmp_path / "stderr.txt"
    with err.open("w") as stream:
        process = subprocess.Popen(
            [sys.executable, "-m", "det_lightning", "experiment", *launch]
            + ["--checkpoint-dir", "ckpt", "--config", "searcher.max_length.batches=100000"]
            + [str(PROJECT / "const.yaml"), str(PROJECT)],
            cwd=tmp_path,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"},
            stdout=subprocess.PIPE,
            stderr=stream,
            text=True,
            start_new_session=True,
        )
        _wait_for(err, "steps_completed=15,", process)  # past the file's length
        os.killpg(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=TIMEOUT_S)
    shown = err.read_text()
    assert process.returncode == 75, shown
    assert shown.count("Stopped by SIGINT") == 1, shown
    assert shown.count("Received SIGINT: finishing the current batch") == 1, shown  # the chief
    assert "error:" not in shown and "Traceback" not in shown, shown
    row = re.search(r"^1\s+INTERRUPTED\s+-\s+(\S+)\s+\S+\s+[0-9a-f]{8}$", out, re.M)
    assert row, out
    # The batches its checkpoint holds (the trial recorded none: it did not end).
    assert row.group(1).isdigit() and int(row.group(1)) >= 15, out


def _on_two_processes(tmp_path: pathlib.Path, config: str, *overrides: str) -> Any:
    """``det-lightning experiment --devices 2`` on the CPU, 2 batches a trial."""
    flags = [f for override in overrides for f in ("--config", override)]
    return run_cli(
        "experiment",
        "--devices",
        "2",
        "--accelerator",
        "cpu",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--config",
        "searcher.max_length.batches=2",
        *flags,
        str(PROJECT / config),
        str(PROJECT),
        cwd=tmp_path,
    )


@pytest.mark.slow
@pytest.mark.distributed
def test_an_experiment_on_two_processes_prints_each_line_once(tmp_path: pathlib.Path) -> None:
    result = _on_two_processes(tmp_path, "const.yaml")
    assert result.returncode == 0, output(result)
    for line in (
        "ignored when running locally: environment",
        "('regression-const'): 1 trial(s)",
        "trial 1 (single): ",
        "trial 1: starting 2 processes (torchrun --standalone)",
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
    ):
        assert result.stderr.count(line) == 1, (line, output(result))
    assert "GLOBAL_RANK: 1" not in result.stderr, output(result)


@pytest.mark.slow
@pytest.mark.distributed
def test_a_search_of_two_trials_on_two_processes_each_runs_both(tmp_path: pathlib.Path) -> None:
    """Each trial meets at its own torchrun (the worker is never a rank): before, every rank
    was a search worker, and rank 1 waited forever for a trial rank 0 held."""
    # The grid: hidden_size's two values.
    result = _on_two_processes(tmp_path, "search.yaml", "hyperparameters.learning_rate=0.01")
    assert result.returncode == 0, output(result)
    assert result.stdout.count(" COMPLETED ") == 2, output(result)
    for number in (1, 2):
        assert f"trial {number}: starting 2 processes" in result.stderr, output(result)
    assert result.stderr.count("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2") == 2
    assert "GLOBAL_RANK: 1" not in result.stderr, output(result)


@pytest.mark.slow
@pytest.mark.distributed
def test_more_processes_than_cores_warns_once(tmp_path: pathlib.Path) -> None:
    (tmp_path / "script.py").write_text("print('ran', flush=True)\n")
    asked = cpu_count() + 1
    result = run_cli(
        "run", "--devices", str(asked), "--accelerator", "cpu", "script.py", cwd=tmp_path
    )
    assert result.returncode == 0, output(result)
    assert result.stdout.count("ran") == asked, output(result)
    warning = f"det-lightning: warning: --devices {asked} starts {asked} processes on "
    assert result.stderr.count(warning) == 1, output(result)


@pytest.mark.slow
def test_a_search_whose_journal_cannot_be_written_is_one_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a-file").write_text("")  # as root no folder is read-only: one under a file
    result = run_cli(
        "experiment",
        "--checkpoint-dir",
        str(tmp_path / "a-file" / "ckpt"),
        str(PROJECT / "search.yaml"),
        str(PROJECT),
        cwd=tmp_path,
    )
    assert result.returncode == 2, output(result)
    last = result.stderr.splitlines()[-1]
    assert last.startswith("det-lightning experiment: error: "), output(result)
    assert f"cannot be written in {tmp_path / 'a-file' / 'ckpt'}" in last, output(result)
    assert "give a writable folder with --checkpoint-dir" in last, output(result)
    assert "Traceback" not in result.stderr, output(result)
