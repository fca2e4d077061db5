"""``python -m det_lightning.launch.torch_distributed python3 train.py`` (and the
``determined.launch.torch_distributed`` path through the alias) runs the script as
``det-lightning run`` does."""

import pathlib
import subprocess
import sys

from tests.integration.cli_support import (
    PROJECT,
    VALIDATION_LOG_ENV,
    output,
    read_validation_log,
    run_cli,
)

LAUNCHER = [sys.executable, "-m", "det_lightning.launch.torch_distributed"]


def test_launcher_module_trains_the_script(isolated_run: pathlib.Path) -> None:
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "python3",
        str(PROJECT / "train.py"),
        "--batches",
        "6",
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
        command=LAUNCHER,
    )
    assert result.returncode == 0, output(result)
    assert [v["batches"] for v in read_validation_log(log)] == [4, 6]


def test_determined_launcher_path_through_the_alias(isolated_run: pathlib.Path) -> None:
    """``det-lightning run -m determined.launch.torch_distributed python3 train.py``: the module
    Determined's entrypoints name, resolved to det_lightning's."""
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "run",
        "-m",
        "determined.launch.torch_distributed",
        "--",
        "python3",
        str(PROJECT / "train.py"),
        "--batches",
        "4",
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)
    assert [v["batches"] for v in read_validation_log(log)] == [4]


def test_imported_through_the_alias_it_is_ours(isolated_run: pathlib.Path) -> None:
    code = (
        "from det_lightning import compat; compat.install()\n"
        "import determined.launch.torch_distributed as t\n"
        "print(t.__name__, t.parse_args(['--nnodes', '1', '--', 'python3', 'x.py']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=isolated_run, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "det_lightning.launch.torch_distributed (['--nnodes', '1'], ['python3', 'x.py'])"
    )


def test_unsupported_override_and_legacy_trial_are_usage_errors(
    isolated_run: pathlib.Path,
) -> None:
    result = run_cli(
        "--rdzv_backend", "c10d", "--", "python3", "train.py", cwd=isolated_run, command=LAUNCHER
    )
    assert result.returncode == 2, output(result)
    assert "override '--rdzv_backend' is not supported locally" in result.stderr
    result = run_cli("--trial", "model_def:Trial", cwd=isolated_run, command=LAUNCHER)
    assert result.returncode == 2, output(result)
    assert "det-lightning experiment" in result.stderr
    result = run_cli(cwd=isolated_run, command=LAUNCHER)
    assert result.returncode == 2 and "empty script is not allowed" in result.stderr
