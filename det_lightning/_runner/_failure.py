"""A search's trial that failed: one line on the console, its traceback in the trial's log file
(``<checkpoint dir>/<experiment id>/trial-<n>/error.log``, beside its checkpoints), so a search
of many trials does not scroll a traceback per failure past its summary."""

import logging
import pathlib
import time
import traceback
from typing import Optional

from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning")

LOG_NAME = "error.log"


def error_log(checkpoint_root: CheckpointStore, number: int) -> pathlib.Path:
    """Trial ``number``'s log file on this machine."""
    return checkpoint_root.staging() / f"trial-{number}" / LOG_NAME


def append_traceback(path: pathlib.Path, header: str, error: BaseException) -> None:
    """Appends ``----- <time> <header>`` and the traceback of ``error`` to ``path``.

    Raises:
        OSError: the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(f"----- {time.strftime('%Y-%m-%d %H:%M:%S')} {header}\n")
        log.write("".join(traceback.format_exception(error)))


def log_failure(
    checkpoint_root: CheckpointStore, number: int, error: BaseException, then: str
) -> None:
    """Logs ``trial <number> failed: <the error's first line>; <then>`` and appends the
    traceback of ``error`` (being handled) to the trial's log file, unless the trial's own
    process wrote its error there already (a command trial's, ``CommandFailed``)."""
    path = error_log(checkpoint_root, number)
    first = (str(error).strip().splitlines() or [""])[0].removeprefix(f"trial {number}: ")
    first = first.rstrip(".")  # "...: <error>; <then>" with no ".;" between
    if not getattr(error, "traceback_logged", False):
        try:
            append_traceback(path, f"trial {number} failed", error)
        except OSError as e:  # the traceback has nowhere to go: show it here, not lose it
            logger.exception(f"trial {number} failed ({then}); its log {path}: {e.strerror}")
            return
    logger.error(f"trial {number} failed: {first}; {then} (traceback in {path})")


def last_error(path: pathlib.Path, offset: int) -> Optional[str]:
    """The last line of the traceback appended to ``path`` past ``offset`` (its size before
    the trial's process started): ``ZeroDivisionError: division by zero``; None if none.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     log = pathlib.Path(d, LOG_NAME)
    ...     try:
    ...         1 / 0
    ...     except ZeroDivisionError as e:
    ...         append_traceback(log, "trial 1 (rank 0) raised", e)
    ...     last_error(log, 0), last_error(log, log.stat().st_size)
    ('ZeroDivisionError: division by zero', None)
    """
    try:
        with path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(" ")]
    lines = [line for line in lines if not line.startswith(("-----", "Traceback"))]
    return lines[-1].strip() if lines else None


__all__ = ["LOG_NAME", "append_traceback", "error_log", "last_error", "log_failure"]
