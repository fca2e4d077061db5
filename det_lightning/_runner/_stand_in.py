"""The real ``determined`` for the Python processes a trial's script starts itself.

On a Determined cluster a task container has ``determined`` installed, so a script may start
``python3 worker.py`` or ``python3 -m determined.launch.wrap_rank 0 -- python3 train.py
worker`` and the new interpreter imports it. A trial here runs under ``det-lightning run``,
whose alias lives in its own process only; :func:`child_environment` gives the processes it
starts ``python3`` from the same installation first on ``PATH`` and a ``determined`` package
on ``PYTHONPATH`` that stands in with det_lightning (``det_lightning/_alias``, which
``search._alias_boot`` sets up).
"""

import os
import pathlib
import sys
from typing import Dict, Mapping

ALIAS_DIR = pathlib.Path(__file__).resolve().parent.parent / "_alias"


def _prepend(entry: str, value: str) -> str:
    parts = [p for p in value.split(os.pathsep) if p and p != entry]
    return os.pathsep.join([entry, *parts])


def child_environment(environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables to set so that a new ``python3`` imports det_lightning as ``determined``.

    >>> env = child_environment({"PATH": "/usr/bin", "PYTHONPATH": "/src"})
    >>> env["PYTHONPATH"] == f"{ALIAS_DIR}{os.pathsep}/src"
    True
    >>> env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    True
    """
    return {
        "PYTHONPATH": _prepend(str(ALIAS_DIR), environ.get("PYTHONPATH", "")),
        "PATH": _prepend(os.path.dirname(sys.executable), environ.get("PATH", "")),
    }


__all__ = ["ALIAS_DIR", "child_environment"]
