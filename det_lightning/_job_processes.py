"""A job's processes: which one is the chief, and how many the machine holds.

Each line once per job: the processes other than the chief (rank 0) keep their progress
lines (``INFO``) to themselves; warnings and errors, a rank's own problems, still print.

A job's processes run the same code, so without this ``det-lightning experiment --devices 2``
printed the experiment's and the trial's announcements, and Lightning's "Initializing
distributed" line, once per process. A leaf module: the runner and the adapters both use it.
"""

import logging
import os
from typing import Any, Mapping

# Loggers whose INFO lines say what the whole job does; on other ranks they only repeat them.
JOB_LOGGERS = ("det_lightning", "lightning.fabric.utilities.distributed")


def is_chief(environ: Mapping[str, str]) -> bool:
    """Whether this process is rank 0 of its job, from the variables torchrun, Lightning's
    launcher and SLURM set (a process started alone is its own chief).

    >>> is_chief({}), is_chief({"RANK": "1"}), is_chief({"LOCAL_RANK": "0", "NODE_RANK": "1"})
    (True, False, False)
    """
    if "RANK" in environ:
        return environ["RANK"] == "0"
    if environ.get("SLURM_NTASKS", "1") not in ("", "1") and "SLURM_PROCID" in environ:
        return environ["SLURM_PROCID"] == "0"
    return environ.get("LOCAL_RANK", "0") == "0" and environ.get("NODE_RANK", "0") == "0"


def quiet_unless_chief(environ: Mapping[str, str]) -> None:
    """On a process other than the chief, the job's loggers print warnings and errors only."""
    if is_chief(environ):
        return
    for name in JOB_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity, where the platform says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def oversubscribed(*, processes: Any, asked: str, on_gpu: bool, cpus: int, gpus: int) -> str:
    """A warning when ``processes`` (``asked``: where the count came from, e.g. ``--devices
    3``) is more than the machine's GPUs (``on_gpu``) or CPU cores; else an empty string.

    >>> oversubscribed(processes=3, asked="--devices 3", on_gpu=False, cpus=2, gpus=0)
    ... # doctest: +ELLIPSIS
    'warning: --devices 3 starts 3 processes on 2 CPU cores: ...'
    >>> oversubscribed(processes=2, asked="--devices 2", on_gpu=False, cpus=2, gpus=0)
    ''
    """
    if not isinstance(processes, int) or processes <= 1:
        return ""
    have, what = (gpus, "GPUs") if on_gpu else (cpus, "CPU cores")
    if processes <= have:
        return ""
    return (
        f"warning: {asked} starts {processes} processes on {have} {what}: they "
        f"share them and the job runs slower than with {have or 1}; ask for {have or 1} or "
        "fewer."
    )


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def has_children() -> bool:
    """Whether this process has a child process running (Linux: ``/proc``'s children lists;
    elsewhere False)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as listed:
                if listed.read().split():
                    return True
        except OSError:
            continue
    return False


__all__ = [
    "JOB_LOGGERS",
    "cpu_count",
    "has_children",
    "is_chief",
    "oversubscribed",
    "pid_alive",
    "quiet_unless_chief",
]
