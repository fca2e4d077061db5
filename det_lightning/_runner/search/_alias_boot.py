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
    worker and reports nothing itself: ``argv`` is read as CPython reads its options (flags
    grouped, ``-X``/``-W`` with a value, attached or not; the first other word is a script).

    >>> _runs_a_launcher(["python3", "-m", "determined.launch.wrap_rank", "0", "--", "x"])
    True
    >>> _runs_a_launcher(["python3", "-X", "importtime", "-um", "determined.launch.wrap_rank"])
    True
    >>> _runs_a_launcher(["python3", "-Wignore", "-mdetermined.launch.wrap_rank"])
    True
    >>> _runs_a_launcher(["python3", "-W", "ignore", "train.py", "-m", "determined.launch.x"])
    False
    >>> _runs_a_launcher(["python3", "-c", "import x", "-m", "determined.launch.x"])
    False
    """
    words = argv[1:]
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--check-hash-based-pycs":
            index += 2
            continue
        if word.startswith("--") or not word.startswith("-") or word == "-":
            return False  # a script, stdin, or --version and the like: no module
        for at, letter in enumerate(word[1:], start=2):
            if letter not in _TAKES_A_VALUE:
                continue  # a flag such as -u or -B
            attached = word[at:]
            value = attached or (words[index + 1] if index + 1 < len(words) else "")
            if letter == "m":
                return value.startswith("determined.launch.")
            if letter == "c":
                return False
            index += 0 if attached else 1  # -X/-W: their value is the next word
            break
        index += 1
    return False


_TAKES_A_VALUE = "cmWX"  # CPython's options with a value (-c and -m end the options)


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
