"""A command entrypoint without a Determined launcher runs once per node, as on Determined.

* A launcher-style script (Determined's ``core_api/4_distributed.py`` shape) reads the slots
  from ``det.get_cluster_info()``, starts a worker per slot through
  ``python3 -m determined.launch.wrap_rank``, and the workers meet at
  ``DistributedContext(chief_ip=...)``: it trains, reports to the search, stops with a
  checkpoint at Ctrl-C and resumes from it.
* A plain ``pytorch.init()`` script (where Determined raised "you must wrap your training
  script with a distributed launch layer") starts its processes at ``init()``: one line says
  so, and it trains on both, stops at Ctrl-C with one line, as ``--devices 2`` does.
"""

import os
import pathlib
import re
import shutil
import sys

import pytest

from tests.integration.cli_support import PROJECT, output, run_cli, signal_when

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = pathlib.Path(__file__).parent / "scripts" / "launcher_style.py"

LAUNCHER_CONFIG = """
name: launcher-style
entrypoint: python3 launcher_style.py launcher
resources:
  slots_per_trial: 2
hyperparameters:
  increment_by: 3
  steps: 10
  hold: {hold}
searcher:
  name: single
  metric: x
  smaller_is_better: false
  max_length: 10
max_restarts: 0
"""


def _project(tmp_path: pathlib.Path, hold: int) -> pathlib.Path:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(SCRIPT, model_dir / SCRIPT.name)
    (model_dir / "config.yaml").write_text(LAUNCHER_CONFIG.format(hold=hold))
    return model_dir


def _experiment(model_dir: pathlib.Path, config: str = "config.yaml") -> list:
    return [sys.executable, "-m", "det_lightning", "experiment", "--accelerator", "cpu"] + [
        "--checkpoint-dir",
        "ckpt",
        config,
        ".",
    ]


def _stop_at(text: str, model_dir: pathlib.Path, env: dict) -> "tuple[int, str, str]":
    """Runs the experiment until ``text`` is in its stderr, sends SIGINT to its process group
    (a Ctrl-C), and returns its exit status, stdout and stderr."""
    return signal_when(_experiment(model_dir), model_dir, env, lambda err: text in err)


def _env(model_dir: pathlib.Path) -> dict:
    release = model_dir / "release"
    return {**os.environ, "OMP_NUM_THREADS": "1", "RELEASE": str(release)}


def test_a_launcher_style_script_trains_on_its_own_workers(tmp_path: pathlib.Path) -> None:
    model_dir = _project(tmp_path, hold=100)  # never holds
    result = run_cli(*_experiment(model_dir)[3:], cwd=model_dir, env=_env(model_dir))
    assert result.returncode == 0, output(result)
    # x grows by both ranks' increment_by (3 + 3) a step: 60 after 10; the search ranked it.
    assert re.search(r"^1\s+COMPLETED\s+-\s+10\s+60\s", result.stdout, re.M), output(result)
    assert "best: trial 1 (x=60)" in result.stdout, output(result)
    # get_experiment_best_validation() on both ranks, as Determined's master answers any rank.
    assert "bests at step 2: [12.0, 12.0]" in result.stderr, output(result)
    assert "bests at step 10: [60.0, 60.0]" in result.stderr, output(result)
    for rank in (0, 1):  # wrap_rank's prefix; the workers' python3 is this installation's
        line = re.search(
            rf"^\[rank={rank}\] .* worker {rank} of 2, python (\S+)$", result.stderr, re.M
        )
        assert line, output(result)
        assert os.path.dirname(line.group(1)) == os.path.dirname(sys.executable), line.group(0)
    assert "Traceback" not in result.stderr, output(result)


def test_a_launcher_style_trial_stops_at_ctrl_c_and_resumes(tmp_path: pathlib.Path) -> None:
    """The launcher waits for its workers, which stop with a checkpoint (status 75); the
    rerun hands that checkpoint to the workers, which go on from step 4 to the same x."""
    model_dir = _project(tmp_path, hold=4)
    status, out, err = _stop_at("steps_completed=4,", model_dir, _env(model_dir))
    assert status == 75, (status, out, err)
    assert re.search(r"^1\s+INTERRUPTED\s+-\s+4\s+24\s", out, re.M), (out, err)
    assert err.count("waiting for the workers this command started") == 1, err
    for rank in (0, 1):  # each worker heard of it once (through wrap_rank, in its own session)
        assert len(re.findall(rf"^\[rank={rank}\] .* SIGINT received", err, re.M)) == 1, err
    assert "Stopped by SIGINT" in err, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err

    (model_dir / "release").touch()
    result = run_cli(*_experiment(model_dir)[3:], cwd=model_dir, env=_env(model_dir))
    assert result.returncode == 0, output(result)
    assert "resumed at step 4 with x=24" in result.stderr, output(result)
    assert re.search(r"^1\s+COMPLETED\s+-\s+10\s+60\s", result.stdout, re.M), output(result)


TRAIN_CONFIG = """
name: once-per-node
entrypoint: python3 train.py --batches 6
hyperparameters:
  global_batch_size: 8
  learning_rate: 0.05
  hidden_size: 8
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: {batches}
resources:
  slots_per_trial: 2
max_restarts: 0
"""


def _train_project(tmp_path: pathlib.Path, batches: int) -> pathlib.Path:
    model_dir = tmp_path / "model"
    shutil.copytree(PROJECT, model_dir)
    (model_dir / "config.yaml").write_text(TRAIN_CONFIG.format(batches=batches))
    (model_dir / "train.py").write_text(
        "import sys\nprint('before init', flush=True, file=sys.stderr)\n"
        + (PROJECT / "train.py").read_text()
    )
    return model_dir


def test_pytorch_init_starts_a_process_per_slot(tmp_path: pathlib.Path) -> None:
    model_dir = _train_project(tmp_path, batches=6)
    result = run_cli(*_experiment(model_dir)[3:], cwd=model_dir)
    assert result.returncode == 0, output(result)
    assert re.search(r"^1\s+COMPLETED\s+-\s+6\s", result.stdout, re.M), output(result)
    said = "det-lightning: pytorch.init() in a trial of 2 slots: starting 2 processes"
    assert result.stderr.count(said) == 1, output(result)
    assert result.stderr.count("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2") == 1
    # The script's code before init() ran in the node's process, then in each rank.
    assert result.stderr.count("before init") == 3, output(result)


def test_a_relaunched_trial_stops_at_ctrl_c_with_one_line(tmp_path: pathlib.Path) -> None:
    model_dir = _train_project(tmp_path, batches=100000)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    status, out, err = _stop_at("steps_completed=8,", model_dir, env)
    assert status == 75, (status, out, err)
    assert err.count("Stopped by SIGINT") == 1, err
    assert "Traceback" not in err and "waiting for the workers" not in err, err
    row = re.search(r"^1\s+INTERRUPTED\s+-\s+(\d+)\s", out, re.M)
    assert row and int(row.group(1)) >= 8, (out, err)


CORE_SCRIPT = """
import sys
import determined as det

print("before init", file=sys.stderr, flush=True)
with det.core.init() as core_context:
    ranks = core_context.distributed.allgather(core_context.distributed.rank)
    if core_context.distributed.rank == 0:
        x = 10 * len(ranks) + sum(ranks)  # 21: two ranks, 0 and 1
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"x": x})
"""


def test_core_init_starts_a_process_per_slot(tmp_path: pathlib.Path) -> None:
    """``core.init()`` without a ``DistributedContext`` (Determined: "you must provide a valid
    DistributedContext for a multi-slot task") starts the ranks as ``pytorch.init()`` does."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "loop.py").write_text(CORE_SCRIPT)
    (model_dir / "config.yaml").write_text(
        "name: core-once-per-node\nentrypoint: python3 loop.py\n"
        "resources: {slots_per_trial: 2}\n"
        "searcher: {name: single, metric: x, max_length: 1}\nmax_restarts: 0\n"
    )
    result = run_cli(*_experiment(model_dir)[3:], cwd=model_dir)
    assert result.returncode == 0, output(result)
    said = "det-lightning: core.init() in a trial of 2 slots: starting 2 processes"
    assert result.stderr.count(said) == 1, output(result)
    assert "best: trial 1 (x=21)" in result.stdout, output(result)
    assert result.stderr.count("before init") == 3, output(result)
