"""``det-lightning check`` on Determined's own projects (the fixture project's trial class and
script, Determined's ``pytorch_no_op`` test fixture) beside a broken one: one table, a smoke run
(test mode and a restore) for each project that can run, exit status 1 for the broken one."""

import pathlib
import shutil

import pytest

from tests.integration.cli_support import PROJECT, REPO_ROOT, output, run_cli

NOOP_CONFIG = """\
name: noop
entrypoint: model_def:NoopPyTorchTrial
hyperparameters:
  global_batch_size: 4
  dataset_len: 64
searcher:
  name: single
  metric: validation_error
  max_length:
    batches: 4
"""

BROKEN = """\
import determined as det
from determined import pytorch
import no_such_package_xyz


class Trial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.env = det.EnvContext  # refused: the cluster's environment
"""


@pytest.mark.slow
def test_check_a_folder_of_projects(isolated_run: pathlib.Path, tmp_path: pathlib.Path) -> None:
    projects = isolated_run / "projects"
    shutil.copytree(PROJECT, projects / "regression")
    for name in ("asha.yaml", "search.yaml"):  # the same code: two configs are enough
        (projects / "regression" / name).unlink()
    noop = REPO_ROOT / "tests" / "experiment" / "fixtures" / "pytorch_no_op"
    shutil.copytree(noop, projects / "noop")
    (projects / "noop" / "noop.yaml").write_text(NOOP_CONFIG)
    (projects / "broken").mkdir()
    (projects / "broken" / "model_def.py").write_text(BROKEN)
    (projects / "broken" / "broken.yaml").write_text(
        "entrypoint: model_def:Trial\nsearcher: {name: single, metric: loss, "
        "max_length: {batches: 1}}\nenvironment: {image: x}\n"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = run_cli("check", "projects", "--scratch", str(scratch), cwd=isolated_run)
    assert result.returncode == 1, output(result)
    rows = [line.split() for line in result.stdout.splitlines()[1:5]]
    assert rows == [
        ["projects/broken/broken.yaml", "FAIL", "1", "1", "1", "-"],
        ["projects/noop/noop.yaml", "ok", "0", "0", "0", "passed"],
        ["projects/regression/const.yaml", "ok", "0", "0", "1", "passed"],  # environment
        ["projects/regression/script.yaml", "ok", "0", "0", "0", "passed"],
    ], output(result)
    assert "refused: determined.EnvContext (model_def.py:8): " in result.stdout
    assert "missing package: no_such_package_xyz (model_def.py:3)" in result.stdout
    assert result.stdout.rstrip().endswith("3 of 4 would run."), output(result)
    # The scratch folder is gone; nothing was written into the projects nor the default places.
    assert not list(scratch.iterdir())
    assert sorted(p.name for p in isolated_run.iterdir()) == ["projects"]
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "tensorboard").exists()
    assert not list(projects.rglob("checkpoints")) and not list(projects.rglob("tensorboard"))


@pytest.mark.slow
def test_check_the_examples_without_smoke_runs(tmp_path: pathlib.Path) -> None:
    result = run_cli("check", "--no-smoke", str(REPO_ROOT / "examples"), cwd=tmp_path)
    assert result.returncode == 0, output(result)
    assert result.stdout.splitlines()[1].split()[1:] == ["ok", "0", "0", "0", "-"]
