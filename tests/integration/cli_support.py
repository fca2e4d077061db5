"""Running ``det-lightning`` in a child process, and reading what it left behind.

The CLI aliases ``determined`` to ``det_lightning`` in its own process; running it (and loading
checkpoints of code that imports ``determined``) in children keeps the alias out of pytest.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from tests.fixtures import warm

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT = REPO_ROOT / "tests" / "fixtures" / "determined_project"
VALIDATION_LOG_ENV = "FIXTURE_VALIDATION_LOG"
TIMEOUT_S = 300  # a loaded machine imports torch and Lightning slowly

# picky_def.py beside the fixture project's model_def.py: a trial rejecting hidden_size 8.
INVALID_TRIAL = """
import determined as det
from model_def import RegressionTrial


class PickyTrial(RegressionTrial):
    def __init__(self, context):
        if context.get_hparam("hidden_size") == 8:
            raise det.InvalidHP("hidden_size 8 is not allowed")
        super().__init__(context)
"""


def run_cli(
    *args: str,
    cwd: pathlib.Path,
    env: Optional[Dict[str, str]] = None,
    command: Optional[List[str]] = None,
) -> subprocess.CompletedProcess:
    """``python -m det_lightning ARGS`` (or ``command ARGS``) in ``cwd``, forked from the warm
    launcher (``tests/fixtures/warm.py``); never writes bytecode next to the fixture project."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    argv = (command or [sys.executable, "-m", "det_lightning"]) + list(args)
    return warm.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=TIMEOUT_S)


def signal_when(
    argv: List[str],
    cwd: pathlib.Path,
    env: Dict[str, str],
    ready: Callable[[str], bool],
    sig: int = signal.SIGINT,
    then: Optional[Callable[[], None]] = None,
) -> Tuple[int, str, str]:
    """Runs ``argv`` in a session of its own until ``ready(its stderr so far)``, sends ``sig``
    to its process group (a Ctrl-C, or a scheduler's SIGTERM), calls ``then`` (say, releasing
    a process that waits for the signal), and returns its exit status, stdout and stderr."""
    err = cwd / "stderr.txt"
    with err.open("w") as stream:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stream,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + TIMEOUT_S
        while not ready(err.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"never ready:\n{err.read_text()}")
            time.sleep(0.05)
        os.killpg(process.pid, sig)
        if then is not None:
            then()
        out, _ = process.communicate(timeout=TIMEOUT_S)
    return process.returncode, out, err.read_text()


def output(result: subprocess.CompletedProcess) -> str:
    return f"exit status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def read_validation_log(path: pathlib.Path) -> List[Dict[str, Any]]:
    """The lines ``model_def.ValidationLog`` appended."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def project_files() -> Dict[str, bytes]:
    """Every file of the fixture project with its contents (to prove nothing changed)."""
    return {
        str(p.relative_to(PROJECT)): p.read_bytes()
        for p in sorted(PROJECT.rglob("*"))
        if p.is_file()
    }


_LOAD = """
import json, sys
import torch
from det_lightning import compat
compat.install()
import determined as det
from determined import pytorch
from det_lightning.pytorch import _checkpoint as ckpt

path, how = sys.argv[1], sys.argv[2]
if how == "trial_class":
    with det.import_from_path(path + "/code"):
        import model_def
        trial = pytorch.load_trial_from_checkpoint_path(path, trial_class=model_def.RegressionTrial)
else:
    trial = pytorch.load_trial_from_checkpoint_path(path, trust_code=True)
saved = ckpt.read_state_dict(__import__("pathlib").Path(path))[ckpt.MODELS][0]
loaded = trial.model.state_dict()
diff = max(float((loaded[k] - saved[k]).abs().max()) for k in saved)
print(json.dumps({
    "class": type(trial).__module__ + "." + type(trial).__qualname__,
    "is_trial": isinstance(trial, pytorch.PyTorchTrial),
    "hparams": trial.context.get_hparams(),
    "max_weight_difference": diff,
    "keys": sorted(saved) == sorted(loaded),
}))
"""


def load_checkpoint(path: pathlib.Path, how: str, cwd: pathlib.Path) -> Dict[str, Any]:
    """Loads the fixture trial from checkpoint ``path`` in a child process.

    Args:
        how: ``"trial_class"`` (imported with ``det.import_from_path`` from its ``code/``) or
            ``"trust_code"``.
    """
    result = run_cli(str(path), how, cwd=cwd, command=[sys.executable, "-c", _LOAD])
    assert result.returncode == 0, output(result)
    loaded: Dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def experiment_dir(
    root: pathlib.Path, config: "os.PathLike[str] | str | Dict[str, Any]"
) -> pathlib.Path:
    """The folder under ``root`` (checkpoints or TensorBoard files) of the experiment that
    ``config`` (a YAML path or the config itself) describes: ``root / <experiment id>``."""
    from det_lightning._runner._search_settings import experiment_id
    from det_lightning._runner.config import load_config

    loaded = load_config(config if isinstance(config, dict) else str(config))
    return root / experiment_id(loaded.as_given)
