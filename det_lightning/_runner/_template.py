"""Each trial of a search in a process of its own, started in well under a second.

A trial that ran inside the worker's own process left it its module globals, its leaked
objects and its GPU allocator's cache; a trial started as a new interpreter pays for importing
torch and Lightning again (seconds, for trials that may train for seconds). So a worker keeps
one warm *template* process that has imported them, and forks each trial from it::

    worker (TrialStarter)                     template (python -m
                                                det_lightning._runner._template)
      __enter__: starts the template            imports torch, lightning, optuna,
                                                det_lightning.pytorch and .adapters (no CUDA,
                                                no threads); blocks SIGINT/SIGTERM; "ready"
      start(request)      -- request -->        flushes, forks; the child (become_trial):
                                                    own process group, dies with its parent,
                                                    cwd, environment, argv, fresh random seeds,
                                                    runs request.job, exit handlers, exits
                          <-- pid ------
      wait / signal / kill: the child's group
                          <-- exit status --    waitpid
      __exit__: closes the socket -->           exits (and dies with the worker: SIGKILL)

A trial's process group is its own: the worker passes a SIGTERM/SIGINT on to it exactly once
(``SearchInterrupt.forwarding``), and a second signal kills the worker, then the template,
then the trial (each dies with its parent, ``PR_SET_PDEATHSIG``). The template blocks both
signals rather than ignoring them, and a forked trial unblocks them only once its handlers are
set: one passed on while the trial's process was still becoming the trial waits for it
(ignored, it was lost, and the trial trained on after its search had stopped). Where fork
cannot be used (no ``os.fork``, or ``DET_LIGHTNING_WARM_START=0``), each trial is a new
interpreter running the same ``become_trial``, and the log says so once. The trial's output
goes to the worker's own stdout and stderr, as the template inherited them.
"""

import atexit
import ctypes
import dataclasses
import importlib
import importlib.util
import logging
import os
import pickle
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from typing import Any, Dict, List, Optional, Tuple

logger = logging.getLogger("det_lightning")

WARM_START_ENV = "DET_LIGHTNING_WARM_START"  # "0": each trial a new interpreter
# What every trial would import again: torch, Lightning, det_lightning, the search's reporter,
# TensorBoard's writer (Lightning's logger imports it in fit()), and the object-store libraries
# Lightning imports to tell a checkpoint URL from a path, where installed.
PRELOAD = (
    "torch",
    "lightning",
    "optuna",
    "det_lightning.pytorch",
    "det_lightning.adapters",
    "det_lightning._runner.cli",
    "det_lightning._runner.search._jobs",
    "det_lightning._runner.search._child",
    "torch.utils.tensorboard",
)
PRELOAD_IF_INSTALLED = ("s3fs", "gcsfs", "adlfs")
_PR_SET_PDEATHSIG = 1
PASSED_ON = (signal.SIGINT, signal.SIGTERM)  # what the worker sends a trial's process group


@dataclasses.dataclass(frozen=True)
class TrialRequest:
    """What a trial's process runs: ``job`` (``"module:function"``) called with ``args``
    (picklable), returning the exit status, in ``cwd`` with ``env`` and ``sys.argv = argv``."""

    job: str
    args: Tuple[Any, ...]
    cwd: str
    env: Dict[str, str]
    argv: List[str]


def fork_unavailable() -> Optional[str]:
    """Why trials cannot be forked from a warm process here, or None."""
    if os.environ.get(WARM_START_ENV, "1").strip() == "0":
        return f"${WARM_START_ENV} is 0"
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"this platform ({sys.platform}) lacks fork and PR_SET_PDEATHSIG"
    return None


# ----- the wire: length-prefixed pickles between the worker and its template -----------------


def _send(sock: socket.socket, message: Any) -> None:
    data = pickle.dumps(message)
    sock.sendall(struct.pack("!I", len(data)) + data)


def _receive(sock: socket.socket) -> Any:
    """The next message; raises EOFError when the other end closed."""
    (size,) = struct.unpack("!I", _read_exactly(sock, 4))
    return pickle.loads(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise EOFError("the other end closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ----- inside a trial's process ----------------------------------------------------------------


def die_with_parent(parent: int) -> None:
    """This process gets SIGKILL when ``parent`` (the process that started it) dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(128 + signal.SIGKILL)


def _reseed() -> None:
    """Random state as a new interpreter has it: a forked child would repeat the template's."""
    random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _exit_status(code: Any) -> int:
    """``sys.exit(code)``'s exit status, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_job(request: TrialRequest) -> int:
    try:
        module, name = request.job.split(":")
        return int(getattr(importlib.import_module(module), name)(*request.args) or 0)
    except SystemExit as e:  # errors.TrialPreempted among them (status 75)
        return _exit_status(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def _finish() -> None:
    """What the interpreter does on exit: wait for non-daemon threads, run exit handlers,
    flush the standard streams."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # closed by the trial
            pass


def become_trial(request: TrialRequest, parent: int) -> None:
    """Turns this process (a fork of the template, or a new interpreter) into the trial's
    process, runs it and exits with its status; never returns."""
    status = 1
    try:
        if os.getpgid(0) != os.getpid():
            os.setpgid(0, 0)
        die_with_parent(parent)
        # A signal sent since the fork was held (the template blocks them): it acts now, at
        # its default, as on a new interpreter before its start-up: it ends the process.
        for signum in PASSED_ON:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        started_in = os.getcwd()
        os.chdir(request.cwd)
        if sys.path and sys.path[0] in (started_in, ""):  # as `python -m` started in cwd has it
            sys.path[0] = os.getcwd()
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = list(request.argv)
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))  # read at the template's start
        _reseed()
        status = _run_job(request)
    finally:
        _finish()
        os._exit(status)


# ----- the template ----------------------------------------------------------------------------


def _serve(sock: socket.socket) -> None:
    """Forks one trial per request until the worker closes the socket."""
    while True:
        try:
            request = _receive(sock)
        except EOFError:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            become_trial(request, os.getppid())
        try:
            os.setpgid(pid, pid)  # here too, so the worker can signal the group at once
        except OSError:  # the child did it first, or is gone already
            pass
        _send(sock, ("pid", pid))
        _, status = os.waitpid(pid, 0)
        _send(sock, ("exit", os.waitstatus_to_exitcode(status)))


def _preload() -> None:
    """Imports what every trial would, as ``det_lightning.adapters`` imports Lightning: with
    the worker's directory (the model folder, where a search is started there) out of sight,
    so a project's own ``torchvision/`` stand-in cannot answer Lightning's probes for the real
    one. The trial, forked afterwards, sees the project's modules again."""
    from det_lightning._import import without_project_modules

    with without_project_modules():
        for name in PRELOAD:
            importlib.import_module(name)
        for name in PRELOAD_IF_INSTALLED:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)


def main(argv: List[str]) -> None:
    """``python -m det_lightning._runner._template FD WORKER_PID``: the template;
    ``--one WORKER_PID``: one trial, its request on stdin (no fork)."""
    if argv[0] == "--one":
        request = pickle.loads(sys.stdin.buffer.read())
        become_trial(request, int(argv[1]))
    fd, worker = int(argv[0]), int(argv[1])
    die_with_parent(worker)
    # The worker passes them on to the trial. Blocked, not only ignored: a forked trial
    # inherits the mask, so one sent before it set its handlers is held for it, not dropped.
    signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
    for signum in PASSED_ON:
        signal.signal(signum, signal.SIG_IGN)
    _preload()
    sock = socket.socket(fileno=fd)
    _send(sock, ("ready", sorted(t.name for t in threading.enumerate())))
    _serve(sock)


# ----- in the worker ---------------------------------------------------------------------------


class TrialProcess:
    """A running trial's process (its pid leads its process group)."""

    def __init__(
        self,
        pid: int,
        sock: Optional[socket.socket] = None,
        child: "Optional[subprocess.Popen[bytes]]" = None,
    ) -> None:
        self.pid = pid
        self._sock, self._child = sock, child
        self.returncode: Optional[int] = None

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """The exit status (negative: killed by that signal), or None after ``timeout`` s."""
        if self.returncode is not None:
            return self.returncode
        if self._child is not None:
            try:
                self.returncode = self._child.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
            return self.returncode
        assert self._sock is not None
        if not select.select([self._sock], [], [], timeout)[0]:
            return None
        try:
            kind, value = _receive(self._sock)
        except EOFError:  # the template died: so did the trial (PDEATHSIG)
            kind, value = "exit", -signal.SIGKILL
        assert kind == "exit", kind
        self.returncode = int(value)
        return self.returncode

    def signal(self, signum: int) -> None:
        """Sends ``signum`` to the trial's process group (its torchrun and ranks too)."""
        if self.returncode is None:
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:  # a new interpreter not yet in a group of its own
                self._kill(signum)
            except PermissionError:
                pass

    def _kill(self, signum: int) -> None:
        try:
            os.kill(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class TrialStarter:
    """Starts each trial's process, forked from this worker's warm template where it can."""

    def __init__(self) -> None:
        self._why_not = fork_unavailable()
        self._template: "Optional[subprocess.Popen[bytes]]" = None
        self._sock: Optional[socket.socket] = None
        self._ready = False

    def __enter__(self) -> "TrialStarter":
        if self._why_not is not None:
            logger.info(f"each trial starts as a new Python interpreter: {self._why_not}")
        else:
            self._spawn()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop()

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        self._template = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "det_lightning._runner._template",
                str(theirs.fileno()),
                str(os.getpid()),
            ],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._sock, self._ready = ours, False

    def _stop(self) -> None:
        """Ends the template: one still importing (no trial was started) is killed, one that
        serves exits when its socket closes."""
        if self._template is not None and not self._ready:
            self._template.kill()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._template is not None:
            self._template.wait()
            self._template = None

    def start(self, request: TrialRequest) -> TrialProcess:
        """The trial's process, running ``request``."""
        if self._sock is not None:
            try:
                return self._fork(request)
            except (EOFError, OSError):
                logger.warning(
                    "the warm template process is gone: this trial starts as a new "
                    "interpreter, the next from a new template"
                )
                self._stop()
                self._spawn()
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "det_lightning._runner._template",
                "--one",
                str(os.getpid()),
            ],
            stdin=subprocess.PIPE,
            cwd=request.cwd,
            env=request.env,
        )
        assert child.stdin is not None
        child.stdin.write(pickle.dumps(request))
        child.stdin.close()
        return TrialProcess(child.pid, child=child)

    def _fork(self, request: TrialRequest) -> TrialProcess:
        assert self._sock is not None
        if not self._ready:
            kind, threads = _receive(self._sock)
            assert kind == "ready", kind
            if threads != ["MainThread"]:
                logger.warning(
                    f"the warm template process runs threads {threads}: forking it may not be safe"
                )
            self._ready = True
        _send(self._sock, request)
        kind, pid = _receive(self._sock)
        assert kind == "pid", kind
        return TrialProcess(int(pid), sock=self._sock)


if __name__ == "__main__":
    main(sys.argv[1:])
