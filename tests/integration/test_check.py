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


CORE_LOOP = """\
import determined as det

with det.core.init() as core_context:
    core_context.train.report_validation_metrics(steps_completed=1, metrics={"x": 1.0})
"""


@pytest.mark.slow
def test_a_core_api_loop_passes_without_a_smoke_run_and_says_why(tmp_path: pathlib.Path) -> None:
    """A Core API loop has no test mode: a smoke run would train it for its whole length. The
    table says so, the project counts as one that would run, and the note names the command
    that runs it."""
    project = tmp_path / "loop"
    project.mkdir()
    (project / "loop.py").write_text(CORE_LOOP)
    (project / "loop.yaml").write_text(
        "entrypoint: python3 loop.py\nresources: {slots_per_trial: 2}\n"
        "searcher: {name: single, metric: x, max_length: 1}\n"
    )
    result = run_cli("check", "loop/loop.yaml", "loop", cwd=tmp_path)  # named twice: once
    assert result.returncode == 0, output(result)
    rows = result.stdout.split("\n\n")[0].splitlines()[1:]
    assert [row.split()[:2] for row in rows] == [["loop/loop.yaml", "ok"]], output(result)
    assert rows[0].endswith("no test mode"), output(result)
    assert "`det-lightning experiment loop/loop.yaml loop` runs it" in result.stdout
    assert not (project / "checkpoints").exists(), "the loop ran"
