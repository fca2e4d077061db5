"""A project folder with modules named like optional dependencies of Lightning's own imports
(its own ``torchvision/`` package, a ``matplotlib.py`` shim) trains as under the real
Determined, which never imports torchmetrics: Lightning is imported with the project's
directories and modules out of sight (``_import.without_project_modules``)."""

import json
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


# A stand-in package (no transforms module), and a trial recording where its process came
# from and which torchvision it sees.
STAND_IN = "STAND_IN = True  # the project's own torchvision stand-in\n"
PROBE_TRIAL = """
import json, os, sys
import torchvision
from model_def import RegressionTrial


class Probe(RegressionTrial):
    def __init__(self, context):
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().decode().split("\\0")
        record = {"parent": parent, "torchvision": torchvision.__file__, "path0": sys.path[0],
                  "cwd": os.getcwd()}
        with open(os.environ["PROBE_LOG"], "a") as f:
            f.write(json.dumps(record) + "\\n")
        super().__init__(context)
"""


@pytest.mark.slow
def test_a_search_started_in_the_model_folder_keeps_its_template_warm(
    shadowing_project: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The warm template imports Lightning with the model folder out of sight, so a project's
    torchvision stand-in cannot break it; each trial is still forked from it, and sees the
    project's own module first, as in a new interpreter started in the model folder."""
    (shadowing_project / "torchvision" / "__init__.py").write_text(STAND_IN)
    (shadowing_project / "probe_def.py").write_text(PROBE_TRIAL)
    config = (
        (shadowing_project / "search.yaml")
        .read_text()
        .replace("model_def:RegressionTrial", "probe_def:Probe")
        .replace("vals: [2, 8]", "vals: [8]")
        .replace("batches: 8", "batches: 2")
    )
    (shadowing_project / "probe.yaml").write_text(config)
    log = tmp_path / "probe.jsonl"
    result = run_cli(
        "experiment", "probe.yaml", ".", cwd=shadowing_project, env={"PROBE_LOG": str(log)}
    )
    assert result.returncode == 0, output(result)
    assert "Traceback" not in result.stderr and "new interpreter" not in result.stderr, output(
        result
    )
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2, records
    for record in records:  # forked from the template (a new interpreter's parent: the worker)
        assert "det_lightning._runner._template" in record["parent"], record
        assert "--one" not in record["parent"], record
        assert record["torchvision"] == str(shadowing_project / "torchvision" / "__init__.py")
        assert record["path0"] == record["cwd"] == str(shadowing_project), record


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
