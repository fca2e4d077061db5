"""A project folder with modules named like optional dependencies of Lightning's own imports
(its own ``torchvision/`` package, a ``matplotlib.py`` shim) trains as under the real
Determined, which never imports torchmetrics: Lightning is imported with the project's
directories and modules out of sight (``_import.without_project_modules``)."""

import pathlib
import shutil
import subprocess
import sys

import pytest

from det_lightning._import import without_project_modules
from tests.integration.cli_support import PROJECT, output, run_cli

SHADOWS = {
    "torchvision/__init__.py": "raise ImportError('the project\\'s own torchvision stub')\n",
    "matplotlib.py": "SHIM = True  # a project's own plotting shim\n",
}


@pytest.fixture
def shadowing_project(isolated_run: pathlib.Path) -> pathlib.Path:
    project = isolated_run / "project"
    shutil.copytree(PROJECT, project)
    for name, text in SHADOWS.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    return project


def test_run_a_script_beside_shadowing_modules(shadowing_project: pathlib.Path) -> None:
    result = run_cli(
        "run", str(shadowing_project / "train.py"), "--batches", "2", cwd=shadowing_project
    )
    assert result.returncode == 0, output(result)


def test_experiment_with_a_shadowing_model_dir(
    shadowing_project: pathlib.Path, isolated_run: pathlib.Path
) -> None:
    result = run_cli(
        "experiment",
        str(shadowing_project / "const.yaml"),
        str(shadowing_project),
        cwd=isolated_run,
    )
    assert result.returncode == 0, output(result)


@pytest.mark.interop
def test_the_real_determined_trains_the_same_project(shadowing_project: pathlib.Path) -> None:
    """The reference: Determined runs it (so the shadowing modules are the project's right)."""
    result = subprocess.run(
        [sys.executable, "train.py", "--batches", "2"],
        cwd=shadowing_project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr


def test_the_project_keeps_its_own_modules(
    shadowing_project: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the block the shim is out of sight; afterwards the project sees it again."""
    import importlib

    monkeypatch.chdir(shadowing_project)
    monkeypatch.syspath_prepend(str(shadowing_project))
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    shim = importlib.import_module("matplotlib")
    assert shim.SHIM
    path_before = list(sys.path)
    with without_project_modules():
        assert "matplotlib" not in sys.modules
        assert str(shadowing_project) not in sys.path
        assert importlib.util.find_spec("torchvision") is None or (
            pathlib.Path(importlib.util.find_spec("torchvision").origin).parent.parent
            != shadowing_project
        )
    assert sys.modules["matplotlib"] is shim and sys.path == path_before
