"""The package type-checks with pyproject's mypy settings, every module of it as installed.

``adapters/`` installs as ``det_lightning.adapters``; mypy checks it under that name through
``scripts/typecheck.py`` (a symlink tree of the installed layout). A module mypy cannot find
would be ``Any`` at every import of it, hiding each call into it: the settings make that an
error, and the test checks that mypy analysed each module of both source folders.
"""

import importlib.util
import pathlib
import subprocess
import sys
from types import ModuleType
from typing import Set

import pytest

from tests.unit.test_import_graph import SOURCES, find_modules

REPO = pathlib.Path(__file__).resolve().parents[2]


def _typecheck_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("typecheck", REPO / "scripts" / "typecheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _analysed(report: pathlib.Path) -> Set[str]:
    """The modules in mypy's ``--linecount-report`` (its first line is the total)."""
    lines = (report / "linecount.txt").read_text().splitlines()
    return {line.split()[-1] for line in lines[1:]}


@pytest.mark.slow
def test_mypy_checks_every_module_and_finds_no_issues(tmp_path: pathlib.Path) -> None:
    report = tmp_path / "report"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "typecheck.py"),
            "--tree",
            str(tmp_path / "tree"),
            "--linecount-report",
            str(report),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
    missing = set(find_modules(REPO, SOURCES)) - _analysed(report)
    assert not missing, f"modules mypy did not analyse (Any where imported): {sorted(missing)}"


def test_the_tree_lays_out_the_package_as_installed(tmp_path: pathlib.Path) -> None:
    typecheck = _typecheck_script()
    tree = typecheck.lay_out(tmp_path)
    typecheck.lay_out(tmp_path)  # again: replaced, never nested
    adapters = tree / "det_lightning" / "adapters"
    assert (adapters / "module.py").resolve() == REPO / "adapters" / "module.py"
    assert (tree / "det_lightning" / "pytorch" / "_trial.py").resolve() == (
        REPO / "det_lightning" / "pytorch" / "_trial.py"
    )
    assert not (adapters / "adapters").exists()
    assert (REPO / "adapters" / "module.py").is_file()  # the sources are untouched


def test_the_tree_is_never_laid_out_over_a_source_folder(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "det_lightning" / "errors.py"
    source.parent.mkdir()
    source.write_text("x = 1\n")
    with pytest.raises(SystemExit, match="is --tree a source folder"):
        _typecheck_script().lay_out(tmp_path)
    assert source.read_text() == "x = 1\n"


def test_the_report_names_the_repository_files() -> None:
    typecheck = _typecheck_script()
    report = (
        "det_lightning/adapters/fit.py:149: error: ...\n"
        "det_lightning/pytorch/_trial.py:3: note: det_lightning/adapters/x.py\n"
    )
    assert typecheck.repository_paths(report) == (
        "adapters/fit.py:149: error: ...\ndet_lightning/pytorch/_trial.py:3: note: adapters/x.py\n"
    )
