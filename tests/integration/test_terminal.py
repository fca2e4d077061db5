"""The terminal during a trial: log lines print above Lightning's progress bar, never onto the
end of its line, and the validation pass shows a bar of its own."""

import collections
import fcntl
import os
import pathlib
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from typing import Dict, List, Tuple

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, sys
from det_lightning import pytorch
from tests.fixtures.trials import make_trials, seed_everything

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="LOGLINE %(message)s")
seed_everything(1)
with pytorch.init(hparams={"lr": 0.01, "n": 64}) as context:
    trial = make_trials(pytorch)["MLPTrial"](context)
    trainer = pytorch.Trainer(trial, context, enable_progress_bar=True,
                              checkpoint_dir=sys.argv[1], tensorboard_dir=sys.argv[2])
    trainer.fit(max_length=pytorch.Batch(12), reporting_period=pytorch.Batch(3),
                validation_period=pytorch.Batch(6), checkpoint_policy="none")
"""


@pytest.mark.slow
def test_log_lines_print_above_the_progress_bar(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "terminal.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    with open(out, "wb") as terminal:  # the bar (stdout) and the log (stderr) share it
        subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "ck"), str(tmp_path / "tb")],
            stdout=terminal,
            stderr=terminal,
            env=env,
            cwd=tmp_path,
            check=True,
            timeout=240,
        )
    # tqdm clears a lower bar by moving down and back up (ESC [A keeps the column: 0).
    text = out.read_text(errors="replace").replace("\x1b[A", "")
    starts = [i for i in range(len(text)) if text.startswith("LOGLINE", i)]
    reports = [i for i in starts if text.startswith("LOGLINE report_", i)]
    assert len(reports) >= 6, text[-3000:]  # 4 training reports, 2 validations
    assert "Epoch 0" in text and "Validation" in text, text[-3000:]
    glued = [text[max(0, i - 60) : i + 40] for i in starts if i > 0 and text[i - 1] not in "\r\n"]
    assert not glued, "log lines printed onto the bar's line:\n" + "\n".join(map(repr, glued))


# ----- each line once, in a terminal and in a pipe -------------------------------------------

TERMINAL_SCRIPT = REPO / "tests" / "integration" / "scripts" / "terminal.py"
DEADLINE_S = 300  # a loaded machine imports torch and Lightning slowly; the wait ends at exit
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BAR = re.compile(r"^(Epoch \d+|Training|Validation[^|]*|Sanity[^|]*):? *(\d+%)?\|")
PREFIX = re.compile(r"^(INFO|WARNING|ERROR):( \[\d+\] [\w.]+:)? ")  # LOG_FORMAT, Lightning


def _env(tmp_path: pathlib.Path) -> Dict[str, str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "DET_LIGHTNING_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "DET_LIGHTNING_TENSORBOARD_DIR": str(tmp_path / "tensorboard"),
    }
    env.pop("CI", None)  # the progress bar is on in a terminal, unless in CI
    return env


def in_terminal(args: List[str], tmp_path: pathlib.Path) -> Tuple[int, str]:
    """Runs ``python *args`` on a pseudo-terminal of 120 columns; (exit status, what it
    showed). Reads until every process of the run has closed the terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=tmp_path,
        env=_env(tmp_path),
        start_new_session=True,
    )
    os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process has closed the terminal
                break
            if not data:
                break
            shown += data
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no exit in {DEADLINE_S} s:\n{shown.decode(errors='replace')}")
    finally:
        os.close(master)
    return proc.wait(timeout=DEADLINE_S), shown.decode(errors="replace")


def in_pipe(args: List[str], tmp_path: pathlib.Path) -> Tuple[int, str]:
    done = subprocess.run(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=_env(tmp_path),
        timeout=DEADLINE_S,
        start_new_session=True,
    )
    return done.returncode, done.stdout.decode(errors="replace")


def log_lines(shown: str) -> List[str]:
    """The lines a reader sees besides the progress bars (their redraws and erasures removed)."""
    pieces = re.split(r"[\r\n]", ANSI.sub("", shown))
    return [p.strip() for p in pieces if p.strip() and not BAR.match(p.strip())]


def repeated(lines: List[str]) -> List[str]:
    """Lines shown more than once, with or without the ``LOG_FORMAT`` prefix."""
    messages = collections.Counter(PREFIX.sub("", line) for line in lines)
    return [m for m, n in messages.items() if n > 1 and re.search(r"[A-Za-z]", m)]


EXPECTED_ONCE = (
    "report_training_metrics(steps_completed=3,",
    "report_training_metrics(steps_completed=12,",
    "report_validation_metrics(steps_completed=6,",
    "report_validation_metrics(steps_completed=12,",
    "a line from the script at batch 5",
    "fit() done: 12 batches, ",
    "validation_loss: last ",
    "resume from: ",  # the closing summary
)


def resume_path(lines: List[str]) -> pathlib.Path:
    """The checkpoint the closing summary says to resume from."""
    summary = [line for line in lines if "resume from: " in line]
    return pathlib.Path(summary[-1].split("resume from: ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("where", ["terminal", "pipe"])
def test_every_line_once(where: str, tmp_path: pathlib.Path) -> None:
    run = in_terminal if where == "terminal" else in_pipe
    code, shown = run([str(TERMINAL_SCRIPT)], tmp_path)
    assert code == 0, shown[-4000:]
    lines = log_lines(shown)
    assert ("Epoch 0" in shown) == (where == "terminal"), shown[-3000:]
    # The bar: the loss, and the searcher metric once reported; numbers short.
    assert (re.search(r"loss=[0-9.]+, validation_loss=[0-9.]+\]", shown) is not None) == (
        where == "terminal"
    ), shown[-3000:]
    assert not repeated(lines), "\n".join(lines)
    for message in EXPECTED_ONCE:
        found = [line for line in lines if message in line]
        assert len(found) == 1 and PREFIX.match(found[0]), (message, "\n".join(lines))
    assert "np.float" not in shown
    assert (resume_path(lines) / "state_dict.pth").is_file(), "\n".join(lines)


@pytest.mark.slow
def test_without_basic_config_the_bar_changes_nothing_printed(tmp_path: pathlib.Path) -> None:
    """No logging set up: det_lightning's INFO lines stay hidden, under the bar as without it;
    a warning shows once."""
    code, shown = in_terminal([str(TERMINAL_SCRIPT), "--no-basic-config"], tmp_path)
    assert code == 0, shown[-4000:]
    lines = log_lines(shown)
    assert "Epoch 0" in shown
    assert not repeated(lines), "\n".join(lines)
    assert not [line for line in lines if "report_" in line], "\n".join(lines)
    assert [line for line in lines if "a line from the script" in line] == [
        "a line from the script at batch 5"
    ], "\n".join(lines)


@pytest.mark.slow
@pytest.mark.distributed
def test_every_line_once_with_two_processes(tmp_path: pathlib.Path) -> None:
    args = [str(TERMINAL_SCRIPT), "--devices", "2", "--accelerator", "cpu"]
    code, shown = in_terminal(args, tmp_path)
    assert code == 0, shown[-4000:]
    lines = log_lines(shown)
    assert "Epoch 0" in shown, shown[-3000:]
    assert not repeated(lines), "\n".join(lines)
    assert not [line for line in lines if "GLOBAL_RANK: 1" in line]  # the chief's line only
    for message in (
        "GLOBAL_RANK: 0, MEMBER: 1/2",
        "Starting with 2 processes",
        *EXPECTED_ONCE,
    ):
        found = [line for line in lines if message in line]
        assert len(found) == 1, (message, "\n".join(lines))  # the summary: the chief's only
    assert (resume_path(lines) / "state_dict.pth").is_file(), "\n".join(lines)
