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
"""

import contextlib
import logging
import os
import shlex
import signal
import threading
from types import FrameType
from typing import Any, Callable, Dict, Iterator, Optional, Sequence

logger = logging.getLogger("det_lightning")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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


class SearchInterrupt:
    """Records the first SIGTERM/SIGINT while a search runs (``received``: its name)."""

    def __init__(self) -> None:
        self.received: Optional[str] = None
        self._previous: Dict[int, Any] = {}
        self._forward: Optional[Callable[[int], None]] = None

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
            self.received = name
            logger.warning(
                f"Received {name}: the search starts no other trial; a trial "
                f"training stops with a checkpoint. Send {name} again to exit at once."
            )
            if self._forward is not None:
                self._forward(signum)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    @contextlib.contextmanager
    def forwarding(self, send: Callable[[int], None]) -> Iterator[None]:
        """While inside, the first signal is also passed on with ``send(signum)`` (to a trial's
        process group); one that came before is passed on now."""
        self._forward = send
        if self.received is not None:
            send(signal.Signals[self.received])
        try:
            yield
        finally:
            self._forward = None

    def note(self, name: str) -> None:
        """A trial stopped for a signal this handler did not see (fit() had its own)."""
        self.received = self.received or name
