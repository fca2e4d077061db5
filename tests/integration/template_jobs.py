"""Jobs for ``test_search_template.py``, run in trial processes forked from the template
(or started as new interpreters)."""

import json
import os
import signal
import sys

STATE = {"touched": False}


def mutate() -> int:
    """Reports whether an earlier job touched this module's state, then touches it; prints
    without a newline and without flushing (the output must still come out)."""
    print(f"seen={STATE['touched']}", end="")
    STATE["touched"] = True
    return 0


def exit_with(code: int) -> None:
    sys.exit(code)


def fail() -> None:
    raise ValueError("raised in the trial's process")


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def describe() -> int:
    print(
        json.dumps(
            {
                "cwd": os.getcwd(),
                "argv": sys.argv,
                "var": os.environ.get("TEMPLATE_VAR"),
                "own_group": os.getpgid(0) == os.getpid(),
                "lightning": "lightning" in sys.modules,
            }
        ),
        flush=True,
    )
    return 0


def held(signum: int) -> int:
    """Signaled (``signum``) as it starts: never gets this far within 30 s."""
    import time

    time.sleep(30)
    return 0
