"""A search's trial that failed: one line on the console, its traceback in the trial's log file
(``<checkpoint dir>/<experiment id>/trial-<n>/error.log``, beside its checkpoints), so a search
of many trials does not scroll a traceback per failure past its summary."""

import logging
import time
import traceback

from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning")

LOG_NAME = "error.log"


def log_failure(
    checkpoint_root: CheckpointStore, number: int, error: BaseException, then: str
) -> None:
    """Logs ``trial <number> failed: <the error's first line>; <then>`` and appends the
    traceback of ``error`` (being handled) to the trial's log file."""
    path = checkpoint_root.staging() / f"trial-{number}" / LOG_NAME
    first = (str(error).strip().splitlines() or [""])[0].removeprefix(f"trial {number}: ")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"----- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {number} failed\n")
            log.write("".join(traceback.format_exception(error)))
    except OSError as e:  # the traceback has nowhere to go: show it here rather than lose it
        logger.exception(f"trial {number} failed ({then}); its log {path}: {e.strerror}")
        return
    logger.error(f"trial {number} failed: {first}; {then} (traceback in {path})")


__all__ = ["LOG_NAME", "log_failure"]
