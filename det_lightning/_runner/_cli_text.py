"""What ``det-lightning --help`` and ``--version`` print besides the options."""

import importlib.metadata
import platform
import re
import sys

import det_lightning
from det_lightning._runner._launch_checks import LaunchCheckingParser

PROG = "det-lightning"
EXIT_USAGE = 2
EXIT_FAILURE = 1

# The exit statuses, as the module docstring of cli.py explains them; in every --help.
EPILOG = """\
exit status:
  0   success (also a search's trial that raised det.InvalidHP: the search drops it)
  1   a trial or a `check` failed, the experiment was canceled or paused (`experiment
      cancel|pause ID`; `experiment activate ID` continues it), or the real
      `determined` was already imported
  2   a usage or configuration error (the message names the option or config key)
  75  stopped by a signal (SIGINT, SIGTERM) after checkpointing: run the same command
      again to continue (EX_TEMPFAIL)
  `run` exits with the script's own status.
"""


def print_error(command: str, message: str) -> None:
    """``det-lightning COMMAND: error: MESSAGE`` on stderr, as argparse words its own."""
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _torch_build() -> str:
    """torch's version as ``torch.__version__`` gives it, build included (``2.13.0+cu130``,
    ``2.13.0+cpu``), read from its ``torch/version.py`` without importing torch. PyPI's CUDA
    wheels say only ``2.13.0`` in their metadata, which is the fallback."""
    try:
        version_py = importlib.metadata.distribution("torch").locate_file("torch/version.py")
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py.read_text(), re.M)
    except (importlib.metadata.PackageNotFoundError, OSError, UnicodeDecodeError):
        found = None
    return found.group(1) if found else _installed("torch")


def version_text() -> str:
    """``det-lightning <version>`` and, on a second line, the Lightning and torch it runs on
    (read from their files: neither is imported; torch's with its build, ``+cu130``).

    >>> version_text().splitlines()[0] == f"det-lightning {det_lightning.__version__}"
    True
    """
    return (
        f"det-lightning {det_lightning.__version__}\n"
        f"lightning {_installed('lightning')}, torch {_torch_build()}, "
        f"Python {platform.python_version()}"
    )


class CommandParser(LaunchCheckingParser):
    """A command's parser: its ``--help`` ends with the exit statuses (kept as written; the
    description above is wrapped as usual)."""

    def format_help(self) -> str:
        return f"{super().format_help()}\n{EPILOG}"


__all__ = [
    "CommandParser",
    "EPILOG",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "PROG",
    "print_error",
    "version_text",
]
