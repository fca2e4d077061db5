"""Type-check det_lightning with mypy as it is installed: ``adapters/`` as ``det_lightning.adapters``.

setuptools installs the root ``adapters/`` folder as ``det_lightning.adapters`` (pyproject's
``package-dir``). mypy cannot remap a folder's name, and it does not follow the editable
install's import hook, so checked from the repository every ``det_lightning.adapters`` import
would be missing. This script lays the package out as installed, in symlinks
(``TREE/det_lightning/*`` -> ``det_lightning/*``, ``TREE/det_lightning/adapters`` -> ``adapters/``),
runs mypy on it with pyproject.toml's settings and prints mypy's report with the repository's
paths (``adapters/fit.py``, not ``det_lightning/adapters/fit.py``)::

    .venv/bin/python scripts/typecheck.py                      # the whole package
    .venv/bin/python scripts/typecheck.py --linecount-report /tmp/lc  # mypy arguments (absolute paths)
    .venv/bin/python scripts/typecheck.py --tree DIR ...       # the tree elsewhere

The tree (default ``build/typecheck``) is laid out again on each run, so a new module is always
seen; mypy's cache stays in it between runs.
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import List

REPO = pathlib.Path(__file__).resolve().parents[1]
# pyproject.toml's package-dir: the folder installed under another name.
REMAPPED = {"adapters": "det_lightning/adapters"}


def lay_out(tree: pathlib.Path) -> pathlib.Path:
    """Build ``tree/det_lightning`` as the installed package, in symlinks; return the tree."""
    package = tree / "det_lightning"
    if package.is_symlink() or package.is_file():
        package.unlink()
    elif package.exists():
        if not all(entry.is_symlink() for entry in package.iterdir()):
            raise SystemExit(
                f"{package} holds more than the symlinks this script lays out (is --tree a "
                "source folder?); give --tree an empty or earlier tree folder."
            )
        shutil.rmtree(package)  # only symlinks inside: their targets stay
    package.mkdir(parents=True)
    for entry in sorted((REPO / "det_lightning").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder, installed in REMAPPED.items():
        (tree / installed).symlink_to(REPO / folder)
    return tree


def repository_paths(report: str) -> str:
    """mypy's report with each remapped file named by its place in the repository."""
    for folder, installed in REMAPPED.items():
        report = re.sub(rf"(^|\s){re.escape(installed)}/", rf"\g<1>{folder}/", report, flags=re.M)
    return report


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=pathlib.Path, default=REPO / "build" / "typecheck")
    args, mypy_args = parser.parse_known_args(argv)
    tree = lay_out(args.tree.resolve())
    config = ["--config-file", str(REPO / "pyproject.toml")]
    command = [sys.executable, "-m", "mypy", *config, *mypy_args, "-p", "det_lightning"]
    env = {**os.environ, "MYPYPATH": ""}  # the tree alone: never the repository's folders
    result = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=env)
    sys.stdout.write(repository_paths(result.stdout))
    sys.stderr.write(repository_paths(result.stderr))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
