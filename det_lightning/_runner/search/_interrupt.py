"""SIGTERM/SIGINT to a search: the trial stops with a checkpoint, the search starts no other,
prints its summary as it stands and exits with status 75 (``errors.TrialPreempted``); rerunning
the same command continues it.

::

    search process (or the --workers parent)   with SearchInterrupt():   1st signal: recorded
        a worker is a child in the same process group: a signal sent to the group (Ctrl+C,
            SLURM, kill -- -PGID) reaches it, and this process waits for it
        a trial runs in a process group of its own (``_template``): the worker passes the
            signal on to it, once (``forwarding``); its fit() checkpoints and exits with 75
    2nd signal: the signal's default action, at once (the trial's process dies with it)

The experiment's cancel or pause mark (``canceled.json``, ``paused.json``: a client's
``cancel()``, ``kill()`` or ``pause()``, from any process or machine) counts as a first SIGTERM:
``StopWatcher`` looks for it while the search runs, every second in a folder, every
``BUCKET_POLL_S`` in a bucket.
"""

import contextlib
import logging
import os
import shlex
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence

if TYPE_CHECKING:
    from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
FOLDER_POLL_S = 1.0  # how often a search looks for its cancel or pause mark in a folder
BUCKET_POLL_S = 10.0  # in a bucket: two small GETs per worker (the marks), as a lease renewal


def search_advice(argv: Sequence[str]) -> str:
    """What a trial stopped by a signal says: the command that continues it (``argv``: this
    command's arguments).

    >>> search_advice(["experiment", "const.yaml", "."])
    'To continue, rerun the same command: det-lightning experiment const.yaml . (the \
experiment resumes this trial from its latest checkpoint).'
    """
    return (
        f"To continue, rerun the same command: det-lightning {shlex.join(argv)} (the "
        "experiment resumes this trial from its latest checkpoint)."
    )


def past(by: str) -> str:
    """What a client's ``cancel``, ``kill`` or ``pause`` did to the experiment, in a sentence.

    >>> past("kill"), past("pause")
    ('canceled', 'paused')
    """
    return "paused" if by == "pause" else "canceled"


class SearchInterrupt:
    """Records the first SIGTERM/SIGINT while a search runs (``received``: its name), or the
    experiment's cancel or pause (``received``: ``cancel``, ``kill`` or ``pause``; ``mark``:
    its mark)."""

    def __init__(self) -> None:
        self.received: Optional[str] = None
        self.mark: Optional[Dict[str, Any]] = None
        self._signum: Optional[int] = None  # what a trial's process group is sent
        self._previous: Dict[int, Any] = {}
        self._forward: Optional[Callable[[int], None]] = None
        self._lock = threading.Lock()  # the watcher's thread against forwarding()
        self.looker: Optional[Callable[[], None]] = None  # a StopWatcher's look, while on

    def __enter__(self) -> "SearchInterrupt":
        if threading.current_thread() is threading.main_thread():  # else: no handlers at all
            self._previous = {s: signal.signal(s, self._handle) for s in HANDLED_SIGNALS}
        return self

    def __exit__(self, *exc_info: Any) -> None:
        while self._previous:
            signum, handler = self._previous.popitem()
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received, self._signum = name, signum
            logger.warning(
                f"Received {name}: the search starts no other trial; a trial "
                f"training stops with a checkpoint. Send {name} again to exit at once."
            )
            if self._forward is not None:
                self._forward(signum)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def stop(self, mark: Dict[str, Any]) -> None:
        """The experiment was canceled or paused (``mark``: ``_record.stop_mark``): as a first
        SIGTERM, unless a signal came first."""
        from det_lightning._runner._record import stopped_at, stopped_by

        with self._lock:
            if self.received is not None:
                return
            self.mark, self._signum = mark, signal.SIGTERM
            self.received = stopped_by(mark)
            logger.warning(
                f"The experiment was {past(self.received)} ({self.received}() at "
                f"{stopped_at(mark)}): the search starts no other trial; a trial training stops "
                "with a checkpoint. Press Ctrl+C to exit at once."
            )
            if self._forward is not None:
                self._forward(signal.SIGTERM)

    def look(self) -> None:
        """Looks for the experiment's cancel or pause now (before a trial starts: a cancel
        seen by a reader before the trial was RUNNING stops it before it trains)."""
        if self.looker is not None:
            self.looker()

    @contextlib.contextmanager
    def forwarding(self, send: Callable[[int], None]) -> Iterator[None]:
        """While inside, the first signal (or the cancel, the pause) is also passed on with
        ``send(signum)`` (to a trial's process group); one that came before is passed on now."""
        with self._lock:
            self._forward = send
            if self._signum is not None:
                send(self._signum)
        try:
            yield
        finally:
            self._forward = None

    def note(self, name: str) -> None:
        """A trial stopped for a signal this handler did not see (fit() had its own)."""
        self.received = self.received or name


class StopWatcher:
    """While the search runs (``with StopWatcher(folder, interrupt):``), a thread looks for
    the experiment's cancel or pause mark in ``folder`` (the experiment's) and passes it to
    ``interrupt.stop`` once, so that a ``cancel()`` or ``pause()`` from any client or machine
    stops this worker as Ctrl+C would, with its trial's checkpoint."""

    def __init__(
        self, folder: "CheckpointStore", interrupt: SearchInterrupt, every: Optional[float] = None
    ) -> None:
        self.folder, self.interrupt = folder, interrupt
        self.every = (
            every if every is not None else (FOLDER_POLL_S if folder.is_local else BUCKET_POLL_S)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="det-lightning-stop-marks", daemon=True
        )

    def __enter__(self) -> "StopWatcher":
        self.interrupt.looker = self.look
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        self._thread.join(self.every)  # not longer: a read a silent bucket holds up is let be
        self.interrupt.looker = None

    def look(self) -> None:
        """Reads the mark once; passes it on when it is there."""
        from det_lightning._runner._record import stop_mark

        if self.interrupt.received is None:
            mark = stop_mark(self.folder)  # None when it cannot be read: looked for again
            if mark is not None:
                self.interrupt.stop(mark)

    def _watch(self) -> None:
        while not self._stop.wait(self.every) and self.interrupt.received is None:
            self.look()
