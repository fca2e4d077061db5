"""A search's periods and what it tells the user: ``min_validation_period`` and
``min_checkpoint_period`` as written beside an ``adaptive_asha`` search's rungs, one TensorBoard
root per search, the warning for a script's own length, and the summary after a signal."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import List

import pytest
import yaml

from det_lightning._runner._search_settings import SearchSettings, experiment_id
from det_lightning._runner.config import load_config
from det_lightning._runner.plan import plan_experiment
from det_lightning._runner.search._worker import lengths_for
from det_lightning.pytorch import Batch, Epoch
from det_lightning.pytorch._units import unit_reached
from tests.integration.cli_support import (
    PROJECT,
    VALIDATION_LOG_ENV,
    experiment_dir,
    output,
    read_validation_log,
    run_cli,
)

# 64 training records in batches of 8: an epoch is 8 batches. Three trials, rungs at 6 and 12.
ADAPTIVE = """searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_trials: 3
  max_length:
    batches: 12
  divisor: 2
  mode: aggressive
  max_rungs: 3
min_validation_period:
  epochs: 1
min_checkpoint_period:
  records: 32
"""


def _config(searcher: str = ADAPTIVE) -> str:
    head = (PROJECT / "asha.yaml").read_text().split("searcher:")[0]
    return head + searcher + "reproducibility:\n  experiment_seed: 7\n"


def test_adaptive_trials_get_both_periods_as_written_beside_the_rungs() -> None:
    config = load_config(yaml.safe_load(_config()))
    settings = SearchSettings.from_searcher(config.searcher, config.lengths, 8)
    (bracket,) = settings.brackets
    assert bracket.rung_units == (6, 12)
    lengths = lengths_for(settings, bracket, config, {"global_batch_size": 8})
    assert lengths["max_length"] == Batch(12)
    assert lengths["checkpoint_period"] == Batch(4)  # 32 records of 8
    validation = lengths["validation_period"]
    assert [n for n in range(1, 25) if unit_reached(validation, n, epoch_len=8)] == [
        6,
        8,
        12,
        16,
        24,
    ]
    epochs = load_config(yaml.safe_load(_config(ADAPTIVE.replace("records: 32", "epochs: 2"))))
    assert lengths_for(settings, bracket, epochs, {})["checkpoint_period"] == Epoch(2)


@pytest.mark.slow
def test_an_adaptive_search_validates_at_every_epoch_and_at_the_rungs(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    config = isolated_run / "adaptive.yaml"
    config.write_text(_config())
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment",
        str(config),
        str(PROJECT),
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)
    batches: List[List[int]] = [[]]
    for line in read_validation_log(log):  # trials run one after another
        if batches[-1] and line["batches"] <= batches[-1][-1]:
            batches.append([])
        batches[-1].append(line["batches"])
    # A trial validates at the rungs, 6 and 12, and at the epoch's end, 8, unless ranked out
    # at 6. The first trial tops both rungs; with experiment seed 7 the second is ranked out.
    assert len(batches) == 3 and batches[0] == [6, 8, 12], output(result)
    assert all(b in ([6], [6, 8, 12]) for b in batches[1:]) and [6] in batches, output(result)
    # A trial ASHA stopped is its own state in the summary, with its rung.
    states = [re.split(r"\s{2,}", row)[:2] for row in _rows(result.stdout)]
    assert states == [
        [str(n), "COMPLETED" if len(trained) == 3 else "STOPPED EARLY at rung 0"]
        for n, trained in enumerate(batches, start=1)
    ], output(result)


def _rows(stdout: str) -> List[str]:
    return [line for line in stdout.splitlines() if line[:1].isdigit()]


OWN_LENGTH = ("        max_length = None\n", "        max_length = pytorch.Batch(6)\n")


@pytest.mark.slow
def test_a_script_with_its_own_length_is_warned_and_its_trials_complete(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """``entrypoint: python3 train.py`` whose cluster branch calls ``fit(max_length=Batch(6))``
    under a search of 12 batches (rungs at 6 and 12): warned with both lengths and what it
    means; a trial ASHA ranks last at rung 0 has trained its full length there: completed,
    not stopped."""
    project = isolated_run / "project"
    project.mkdir()
    for name in ("model_def.py", "data.py", "const.yaml", "train.py"):
        (project / name).write_text((PROJECT / name).read_text())
    script = (project / "train.py").read_text()
    assert OWN_LENGTH[0] in script
    (project / "train.py").write_text(script.replace(*OWN_LENGTH))
    config = isolated_run / "command.yaml"
    config.write_text(_config().replace("model_def:RegressionTrial", "python3 train.py"))
    result = run_cli("experiment", str(config), str(project), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    warning = (
        "fit(max_length=Batch(value=6)) is not the searcher's length, Batch(value=12): "
        "the trial trains for Batch(value=6). It reaches only the rungs at [6] batches "
        "of [6, 12] batches"
    )
    assert result.stderr.count(warning) == 3, output(result)
    assert "stopped at rung" not in result.stderr, output(result)
    assert (
        "completed: it trained the full length its script asked for, 6 batches, and stops at "
        "rung 0 of [6, 12] batches"
    ) in result.stderr, output(result)
    rows = _rows(result.stdout)
    assert len(rows) == 3 and all(" COMPLETED " in row for row in rows), output(result)


def test_a_search_writes_tensorboard_under_one_root_whenever_it_runs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker, machine and rerun plans the search at another time: the root is named
    for the experiment id, not the clock, for every searcher."""
    monkeypatch.delenv("DET_LIGHTNING_TENSORBOARD_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    ticks = iter(range(1000))
    monkeypatch.setattr(time, "strftime", lambda *args: f"tick{next(ticks)}")
    config = load_config(str(PROJECT / "asha.yaml"))
    roots = {plan_experiment(config, PROJECT).tensorboard_root for _ in range(2)}
    assert roots == {tmp_path / "tensorboard" / experiment_id(config.as_given)}
    single = load_config(str(PROJECT / "const.yaml"))  # like every experiment: by its id
    assert plan_experiment(single, PROJECT).tensorboard_root.name == experiment_id(single.as_given)


SLOW_TRIAL = """
import time

from model_def import RegressionTrial


class SlowTrial(RegressionTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(0.15)  # long enough for the test to signal the search mid-trial
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def _slow_command_project(root: pathlib.Path) -> pathlib.Path:
    project = root / "project"
    project.mkdir()
    for name in ("model_def.py", "data.py", "const.yaml"):
        (project / name).write_text((PROJECT / name).read_text())
    (project / "slow_def.py").write_text(SLOW_TRIAL)
    script = (PROJECT / "train.py").read_text()
    (project / "train.py").write_text(
        script.replace(
            "model_def.RegressionTrial(train_context)", "slow_def.SlowTrial(train_context)"
        ).replace("import model_def\n", "import model_def\nimport slow_def\n")
    )
    return project


@pytest.mark.slow
def test_sigterm_to_a_search_prints_the_summary_and_says_to_rerun_it(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """SIGTERM to the search's process group (as Ctrl+C or a scheduler sends it) while a
    command trial trains: the trial checkpoints and stops, the search prints its summary with
    that trial interrupted, says to rerun the same command, and exits with status 75."""
    project = _slow_command_project(isolated_run)
    config = isolated_run / "command.yaml"
    config.write_text(
        _config()
        .replace("model_def:RegressionTrial", "python3 train.py")
        .replace("batches: 12", "batches: 40")
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    process = subprocess.Popen(
        [sys.executable, "-m", "det_lightning", "experiment", str(config), str(project)],
        cwd=isolated_run,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    trial_dir = experiment_dir(checkpoint_dir, config) / "trial-1"
    deadline = time.monotonic() + 240
    while (
        time.monotonic() < deadline
        and process.poll() is None
        and not (
            trial_dir.is_dir() and any(not p.name.startswith(".") for p in trial_dir.iterdir())
        )
    ):
        time.sleep(0.05)  # polling for the trial's first checkpoint: it is training
    os.killpg(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=240)
    result = f"exit status {process.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert process.returncode == 75, result
    states = [re.split(r"\s{2,}", row)[1] for row in _rows(out)]
    assert states.count("INTERRUPTED") == 1, result
    (interrupted,) = [re.split(r"\s{2,}", row) for row in _rows(out) if "INTERRUPTED" in row]
    last = re.search(r"The last checkpoint is (\S+)\. ", err)  # the row shows the checkpoint
    assert last, result
    shown, newest = interrupted[-1], pathlib.Path(last.group(1)).name
    assert newest.startswith(shown) or shown.endswith(newest), result
    assert "Rerun the same command to continue it" in err, result
    rerun = f"To continue, rerun the same command: det-lightning experiment {config} {project} "
    assert rerun + "(the experiment resumes this trial from its latest checkpoint)" in err, result
    assert "latest_checkpoint='latest'" not in err, result
    assert all(line.count("To continue") <= 1 for line in err.splitlines()), result
