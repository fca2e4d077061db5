"""``import determined`` in a Python process a trial's script started (``_stand_in``): the
alias, and in a search's trial the search's reporting, which the chief worker of a
launcher-style script needs for its ``core.init()`` to rank the trial as ``det-lightning
run``'s own process would.
"""

import atexit
import contextlib
import os
import sys
import types
from typing import List

from det_lightning._env import SEARCH_ENV


def _runs_a_launcher(argv: List[str]) -> bool:
    """Whether the interpreter runs ``-m determined.launch.X`` (``wrap_rank``), which starts a
    worker and reports nothing itself.

    >>> _runs_a_launcher(["python3", "-m", "determined.launch.wrap_rank", "0", "--", "x"])
    True
    >>> _runs_a_launcher(["python3", "train.py", "worker", "-m", "determined.launch.x"])
    False
    """
    words = argv[1:]
    while words and words[0].startswith("-") and words[0] != "-m":
        words = words[1:]  # the interpreter's own flags (-u, -B, ...)
    return words[:1] == ["-m"] and len(words) > 1 and words[1].startswith("determined.launch.")


def stand_in() -> types.ModuleType:
    """Installs the alias and returns det_lightning as ``determined``; in a search's trial,
    the process reports to the search until it exits."""
    from det_lightning import compat

    compat.install()
    import determined  # through the alias: det_lightning

    if os.environ.get(SEARCH_ENV) and not _runs_a_launcher(sys.orig_argv):
        from det_lightning._runner.search._child import reporting_to_search  # imports optuna

        stack = contextlib.ExitStack()
        stack.enter_context(reporting_to_search())
        atexit.register(stack.close)
    return determined


__all__ = ["stand_in"]
