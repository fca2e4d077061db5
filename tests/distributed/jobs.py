"""Running a multi-process job from a test: its own session, a deadline, and no stragglers.

A job's processes (Lightning's re-run scripts, torchrun's workers) share the session of the
command the test starts, so when the command ends or the deadline passes, whatever is left of
the session is waited for and then killed: a hung job fails its test instead of the suite.
"""

import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from tests.fixtures import warm

REPO = pathlib.Path(__file__).resolve().parents[2]
PROBE = pathlib.Path(__file__).parent / "scripts" / "probe.py"
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


@dataclasses.dataclass
class Job:
    returncode: int
    output: str
    seconds: float
    workdir: pathlib.Path
    hung: bool = False  # a process of it was still running at the deadline, and was killed

    def ranks(self, n: int) -> List[Dict[str, Any]]:
        """What each of ``n`` ranks of the probe recorded, in rank order."""
        assert self.returncode == 0, self.output[-6000:]
        # A rank Lightning started aborting at exit leaves rank 0's status at 0; its words stay.
        assert "terminate called" not in self.output, self.output[-6000:]
        out = self.workdir / "out"
        return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]

    def checkpoints(self) -> List[pathlib.Path]:
        root = self.workdir / "checkpoints"
        return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    args: Sequence[str],
    workdir: pathlib.Path,
    env: Optional[Mapping[str, str]] = None,
    log_name: str = "output.txt",
) -> subprocess.Popen:
    """Starts ``python *args`` in ``workdir``, in a new session, with its own storage (forked
    from the warm launcher, ``tests/fixtures/warm.py``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DET_LIGHTNING_CHECKPOINT_DIR": str(workdir / "checkpoints"),
        "DET_LIGHTNING_TENSORBOARD_DIR": str(workdir / "tensorboard"),
        **(env or {}),
    }
    with open(workdir / log_name, "w") as log:
        return warm.Popen(
            [sys.executable, *args],
            cwd=workdir,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish(
    procs: Sequence[subprocess.Popen],
    workdir: pathlib.Path,
    started: float,
    timeout: float,
    log_names: Sequence[str] = ("output.txt",),
) -> Job:
    """Waits for ``procs`` and everything in their sessions until ``timeout`` seconds after
    ``started``, then kills what is left."""
    deadline = started + timeout
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    hung = any(proc.poll() is None for proc in procs)
    for proc in procs:
        _end_session(proc.pid, deadline)
    codes = [proc.poll() for proc in procs]
    returncode = next((c for c in codes if c), 0) if None not in codes else -9
    output = "\n".join((workdir / name).read_text() for name in log_names)
    return Job(returncode, output, time.monotonic() - started, workdir, hung)


def run(
    args: Sequence[str],
    workdir: pathlib.Path,
    timeout: float = 240,
    env: Optional[Mapping[str, str]] = None,
) -> Job:
    started = time.monotonic()
    return finish([start(args, workdir, env)], workdir, started, timeout)


def _end_session(session: int, deadline: float) -> None:
    while _live_members(session) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        os.killpg(session, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _live_members(session: int) -> List[int]:
    """Processes of ``session`` that are not zombies (which may never be reaped here)."""
    live = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, session_id = fields[0], int(fields[3])
        if session_id == session and state != "Z":
            live.append(int(stat.parent.name))
    return live
