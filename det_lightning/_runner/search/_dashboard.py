"""``det-lightning experiment --dashboard``: optuna-dashboard on the search's storage.

The dashboard starts beside the search (it shows trials as they report) and keeps serving after
the summary until Ctrl-C. Without the ``optuna-dashboard`` package, a message says how to
install it and the command that shows the search later.
"""

import contextlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from typing import Iterator, List, Optional

from det_lightning._runner.plan import Plan

INSTALL = "pip install 'det_lightning[dashboard]'"
PROGRAM = "optuna-dashboard"


def dashboard_command(storage_ref: str) -> Optional[List[str]]:
    """``optuna-dashboard STORAGE``, the program found beside this Python first; None when
    the package is not installed."""
    if importlib.util.find_spec("optuna_dashboard") is None:
        return None
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    program = shutil.which(PROGRAM, path=path)
    return None if program is None else [program, storage_ref]


def missing_message(storage_ref: str) -> str:
    """What ``--dashboard`` prints when optuna-dashboard is not installed.

    >>> print(missing_message("ckpt/search.journal"))
    --dashboard: optuna-dashboard is not installed. Install it with
        pip install 'det_lightning[dashboard]'
    then look at this search (while it runs, or after) with
        optuna-dashboard ckpt/search.journal
    """
    return (
        f"--dashboard: optuna-dashboard is not installed. Install it with\n    {INSTALL}\n"
        f"then look at this search (while it runs, or after) with\n"
        f"    {PROGRAM} {shlex.quote(storage_ref)}"
    )


def start_dashboard(plan: Plan) -> Optional["subprocess.Popen[bytes]"]:
    """Starts optuna-dashboard on the plan's search storage (created first: the dashboard
    reads a journal file only once it exists), or prints why not."""
    from det_lightning._runner.search._storage import open_storage, open_studies, storage_ref

    ref = storage_ref(plan.storage, plan.checkpoint_root)
    command = dashboard_command(ref)
    if command is None:
        print(missing_message(ref), file=sys.stderr, flush=True)
        return None
    open_studies(
        open_storage(plan.storage, plan.checkpoint_root),
        plan.experiment_id,
        plan.search,
        seed=plan.config.reproducibility_config.experiment_seed,
    )
    print(
        f"det-lightning: {shlex.join(command)} (http://127.0.0.1:8080 by default)",
        file=sys.stderr,
        flush=True,
    )
    return subprocess.Popen(command)


def wait_dashboard(process: "subprocess.Popen[bytes]") -> None:
    """Keeps the dashboard serving after the search, until it exits or Ctrl-C."""
    print(
        f"det-lightning: {PROGRAM} keeps serving; press Ctrl-C to stop it.",
        file=sys.stderr,
        flush=True,
    )
    try:
        process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def dashboard_beside(plan: Plan, wanted: bool) -> Iterator[None]:
    """Runs the body with the dashboard serving (when ``wanted`` and installed), then keeps it
    serving until Ctrl-C."""
    process = start_dashboard(plan) if wanted else None
    try:
        yield
    finally:
        if process is not None:
            wait_dashboard(process)
