"""A command trial that runs once per node starts its other processes at its first ``init()``.

Determined runs a command entrypoint without a launcher (``python3 train.py``) once per node:
a launcher-style script (``core_api/4_distributed.py``) starts a worker per slot itself, while
``pytorch.init()`` or ``core.init()`` without a ``DistributedContext`` in a multi-slot trial
raise ``ValueError`` there. det_lightning runs such a command once per node too (``run`` under
``$DET_LIGHTNING_ONCE_PER_NODE``), and where Determined raised, the first of these calls
replaces the process with torchrun starting the command once per slot, so that it trains on
every slot as ``--devices N`` would. The code before that call runs once more in each process.
"""

import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional

from det_lightning._env import RELAUNCH_ENV


def plan(pid: int, devices: int, command: List[str]) -> str:
    """The value of ``$DET_LIGHTNING_RELAUNCH`` for ``run``'s process ``pid``.

    >>> json.loads(plan(7, 2, ["python", "-m", "x"]))["devices"]
    2
    """
    return json.dumps({"pid": pid, "devices": devices, "command": command})


def pending(environ: Mapping[str, str], pid: int) -> Optional[Dict[str, Any]]:
    """The relaunch this process may do: only ``run``'s own process (not a worker a
    launcher-style script started, which inherits the variable), never a rank.

    >>> value = plan(7, 2, ["python"])
    >>> pending({RELAUNCH_ENV: value}, 7)["command"], pending({RELAUNCH_ENV: value}, 8)
    (['python'], None)
    >>> pending({RELAUNCH_ENV: value, "RANK": "0"}, 7) is None
    True
    """
    raw = environ.get(RELAUNCH_ENV)
    if not raw or "RANK" in environ:
        return None
    wanted: Dict[str, Any] = json.loads(raw)
    return wanted if wanted.get("pid") == pid else None


def relaunch_if_first(caller: str) -> None:
    """Called by ``pytorch.init()``, ``core.init()`` and
    ``DistributedContext.from_torch_distributed()`` when given no ranks: in the process a
    once-per-node trial's ``run`` marked, replaces it with torchrun, one process per slot.
    Elsewhere, nothing."""
    wanted = pending(os.environ, os.getpid())
    if wanted is None:
        return
    del os.environ[RELAUNCH_ENV]
    command: List[str] = wanted["command"]
    print(
        f"det-lightning: {caller} in a trial of {wanted['devices']} slots: starting "
        f"{wanted['devices']} processes: "
        f"{' '.join(command[1:])}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os.execv(command[0], command)


def shield_from_first_signal() -> None:
    """In the once-per-node process, the first SIGINT or SIGTERM waits for the workers it
    started, which got it too (a trial's signal goes to its process group) and stop with a
    checkpoint; the launcher then exits with their status, as on Determined, where only the
    workers hear of a preemption. Without workers, or at a second signal, the signal acts as
    before. ``exec`` (the relaunch) puts torchrun's own handlers in place."""
    import signal

    from det_lightning._job_processes import has_children

    def handler(signum: int, frame: Any) -> None:
        previous = handlers[signum]
        if has_children() and not shielded:
            shielded.append(signum)
            name = signal.Signals(signum).name
            print(
                f"det-lightning: {name}: waiting for the workers this command started; each "
                f"got the {name} too. Send it again to stop at once.",
                file=sys.stderr,
                flush=True,
            )
            return
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signum, previous)
        os.kill(os.getpid(), signum)

    shielded: List[int] = []
    handlers: Dict[int, Any] = {
        s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)
    }


__all__ = ["pending", "plan", "relaunch_if_first", "shield_from_first_signal"]
