"""``python3 -m determined.launch.wrap_rank RANK -- COMMAND`` in a process a trial's script
starts (``_stand_in.child_environment``): ``python3`` is this installation's, ``determined``
is det_lightning, and the worker's lines carry its rank, as Determined's ``wrap_rank`` does."""

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Dict, List

import pytest

from det_lightning._runner._stand_in import child_environment

TIMEOUT_S = 120


def _env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "OMPI_COMM_WORLD_RANK")}
    return {**env, **child_environment(env), **extra}


def _wrap(*args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["python3", "-m", "determined.launch.wrap_rank", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_a_python_the_trial_starts_imports_det_lightning_as_determined() -> None:
    """Even where the real determined is installed (the interop extra): the stand-in is
    first on ``PYTHONPATH``; ``python3`` is the interpreter running det-lightning."""
    code = "import sys, determined; print(determined.__name__, sys.executable)"
    done = subprocess.run(
        ["python3", "-c", code], env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr
    name, executable = done.stdout.split()
    assert name == "det_lightning"
    assert os.path.dirname(executable) == os.path.dirname(sys.executable)


def test_each_line_carries_the_rank_and_the_status_is_the_workers() -> None:
    worker = "import sys; print('a'); sys.stderr.write('b\\rc\\n'); sys.exit(4)"
    done = _wrap("3", "--", "python3", "-c", worker, env=_env())
    assert done.returncode == 4, done.stderr
    assert done.stdout == "[rank=3] a\n"
    assert done.stderr == "[rank=3] b\n[rank=3] c\n"


@pytest.mark.parametrize(
    "given, extra, expected",
    [
        ("OMPI_COMM_WORLD_RANK,RANK", {"RANK": "5"}, "[rank=5] x\n"),
        ("OMPI_COMM_WORLD_RANK,RANK", {"OMPI_COMM_WORLD_RANK": "2", "RANK": "5"}, "[rank=2] x\n"),
    ],
)
def test_the_rank_may_come_from_the_first_variable_set(
    given: str, extra: Dict[str, str], expected: str
) -> None:
    done = _wrap(given, "python3", "-c", "print('x')", env=_env(**extra))
    assert (done.returncode, done.stdout) == (0, expected), done.stderr


@pytest.mark.parametrize(
    "args, status, words",
    [
        (["RANK", "python3", "-c", "pass"], 1, "none of the environment variables 'RANK' is set"),
        (["0", "--"], 2, "COMMAND is missing"),
        (["0", "--", "no-such-program-here"], 127, "cannot start 'no-such-program-here'"),
    ],
)
def test_bad_input_says_what_is_wrong(args: List[str], status: int, words: str) -> None:
    done = _wrap(*args, env=_env())
    assert done.returncode == status, done.stderr
    assert words in done.stderr


def _wait_for(path: pathlib.Path) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists() or not path.read_text().endswith("\n"):
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.05)
    return path.read_text()


WORKER = """
import os, pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
seen = []
signal.signal(signal.SIGTERM, lambda *_: seen.append(1))
out.write_text(f"{os.getpid()}\\n")
while not seen:
    time.sleep(0.01)
time.sleep(0.5)  # a second delivery, if there were one, arrives meanwhile
print(f"signals {len(seen)}", flush=True)
sys.exit(7)
"""


def test_a_signal_to_the_trials_group_reaches_the_worker_once(tmp_path: pathlib.Path) -> None:
    """wrap_rank forwards the signals it gets (Determined's), and its worker sits in a session
    of its own, so a signal to the whole group is not delivered twice (a second signal means
    "stop at once" to a det_lightning loop)."""
    ready = tmp_path / "pid"
    process = subprocess.Popen(
        ["python3", "-m", "determined.launch.wrap_rank", "0", "python3", "-c", WORKER, str(ready)],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _wait_for(ready)
    os.killpg(process.pid, signal.SIGTERM)
    out, _ = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, out) == (7, "[rank=0] signals 1\n")


def test_the_worker_dies_with_wrap_rank(tmp_path: pathlib.Path) -> None:
    """In a session of its own, the worker is out of reach of a SIGKILL to the trial's group;
    it goes when wrap_rank goes."""
    ready = tmp_path / "pid"
    sleeper = f"import os, pathlib, time; pathlib.Path({str(ready)!r}).write_text(f'{{os.getpid()}}\\n'); time.sleep(600)"
    process = subprocess.Popen(
        ["python3", "-m", "determined.launch.wrap_rank", "0", "python3", "-c", sleeper],
        env=_env(),
        start_new_session=True,
    )
    worker = int(_wait_for(ready))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while _alive(worker):
        assert time.monotonic() < deadline, f"worker {worker} outlived wrap_rank"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
