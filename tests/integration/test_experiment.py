"""``det-lightning experiment``: Determined experiment configs run locally, trial after trial.

The fixture project (tests/fixtures/determined_project) is Determined code, unmodified: its
``model_def.py`` imports ``determined``. Runs go through child processes (see cli_support).
"""

import json
import pathlib
import re
import sys

import pytest
import yaml

from det_lightning import compat, errors
from det_lightning._runner import cli as _cli
from det_lightning._runner import experiment as _experiment
from det_lightning._runner import harness as _harness
from det_lightning._runner import plan as _plan
from det_lightning._runner import trial as _trial
from det_lightning._runner.config import load_config
from det_lightning.pytorch import Batch, Epoch
from det_lightning.pytorch._local_store import LocalStore
from tests.integration.cli_support import (
    INVALID_TRIAL,
    PROJECT,
    VALIDATION_LOG_ENV,
    experiment_dir,
    load_checkpoint,
    output,
    project_files,
    read_validation_log,
    run_cli,
)
from tests.unit.test_search_tensorboard import read_hparams_view


def _config(**overrides: object) -> dict:
    base = {
        "entrypoint": "model_def:RegressionTrial",
        "hyperparameters": {"global_batch_size": 8, "learning_rate": 0.05, "hidden_size": 4},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 4}},
    }
    return {**base, **overrides}


# ----- whole experiments, through the CLI ----------------------------------------------------


def test_legacy_entrypoint_validates_at_config_batches_and_checkpoints(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """const.yaml: max_length {batches: 12}, min_validation_period {batches: 5}."""
    before = project_files()
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment",
        str(PROJECT / "const.yaml"),
        str(PROJECT),
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)

    # Validation after batches 5 and 10 (the period) and 12 (the end), as Determined does.
    assert [v["batches"] for v in read_validation_log(log)] == [5, 10, 12]
    steps = re.findall(r"report_validation_metrics\(steps_completed=(\d+)", result.stderr)
    assert steps == ["5", "10", "12"]
    # Keys that only matter on a cluster are reported once.
    ignored = [
        line for line in result.stderr.splitlines() if "ignored when running locally" in line
    ]
    assert len(ignored) == 1 and "environment" in ignored[0] and "max_restarts" not in ignored[0]

    # The summary names the trial's best checkpoint, under its own trial directory.
    best = re.search(
        r"^best: trial 1 \(validation_loss=([\d.e+-]+)\), checkpoint (\S+)$", result.stdout, re.M
    )
    assert best, output(result)
    losses = [v["validation_loss"] for v in read_validation_log(log)]
    assert float(best.group(1)) == pytest.approx(min(losses), rel=1e-3)
    experiment = experiment_dir(checkpoint_dir, PROJECT / "const.yaml")
    checkpoint = experiment / best.group(2)  # relative to the root the summary names
    assert checkpoint.parent == experiment / "trial-1"
    record = json.loads((experiment / "experiment.json").read_text())
    assert record["id"] == experiment.name and record["searcher"] == "single"
    assert record["model_dir"] == str(PROJECT) and record["config"]["name"]
    assert (checkpoint / "code" / "model_def.py").read_bytes() == before["model_def.py"]

    loaded = load_checkpoint(checkpoint, "trust_code", cwd=isolated_run)
    assert loaded["class"] == "model_def.RegressionTrial" and loaded["is_trial"]
    assert loaded["hparams"] == {"global_batch_size": 8, "learning_rate": 0.05, "hidden_size": 8}
    assert loaded["keys"] and loaded["max_weight_difference"] == 0.0
    assert project_files() == before  # the project is run as it is, and left as it was
    # TensorBoard's HParams view: the trial's hyperparameters in its own run, the searcher
    # metric beside the validation scalars.
    tensorboard = experiment_dir(isolated_run.parent / "tensorboard", PROJECT / "const.yaml")
    values, metrics, scalars = read_hparams_view(tensorboard / "trial-1")
    assert values == {"global_batch_size": 8, "learning_rate": 0.05, "hidden_size": 8}
    assert metrics == ["Determined/validation_loss"] and metrics[0] in scalars

    # `det-lightning checkpoint convert` (in process: it imports no trial code).
    assert _cli.main(["checkpoint", "convert", str(checkpoint), "best.ckpt"]) == 0
    assert (isolated_run / "best.ckpt").stat().st_size > 0


@pytest.mark.slow
def test_grid_search_runs_each_point_and_reports_the_best(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """search.yaml: learning_rate (log, count 2) x hidden_size (2 values) = 4 trials."""
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment",
        str(PROJECT / "search.yaml"),
        str(PROJECT),
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)

    lines = read_validation_log(log)
    points = {(round(v["hparams"]["learning_rate"], 6), v["hparams"]["hidden_size"]) for v in lines}
    assert points == {(0.001, 2), (0.001, 8), (0.1, 2), (0.1, 8)}
    assert [v["batches"] for v in lines] == [4, 8] * 4  # one trial after another
    experiment = experiment_dir(checkpoint_dir, PROJECT / "search.yaml")
    for n in range(1, 5):
        assert len([p for p in (experiment / f"trial-{n}").iterdir()]) >= 1

    rows = re.findall(r"^([1-4])\s+COMPLETED\s+.*?\s([\d.e+-]+)\s+(\S+)$", result.stdout, re.M)
    assert len(rows) == 4, output(result)
    best_per_trial = [min(v["validation_loss"] for v in lines[2 * i : 2 * i + 2]) for i in range(4)]
    for (number, metric, path), expected in zip(rows, best_per_trial):
        assert float(metric) == pytest.approx(expected, rel=1e-3)
        assert _shows(path, experiment / f"trial-{number}"), output(result)
    winner = 1 + best_per_trial.index(min(best_per_trial))
    assert re.search(rf"^best: trial {winner} \(validation_loss=", result.stdout, re.M), output(
        result
    )


def _shows(cell: str, trial_dir: pathlib.Path) -> bool:
    """Whether a summary's checkpoint cell names a checkpoint of ``trial_dir``: its path under
    the root, its UUID, or the UUID's start."""
    return cell != "-" and any(
        f"{trial_dir.name}/{p.name}" == cell or p.name.startswith(cell) for p in trial_dir.iterdir()
    )


@pytest.mark.slow
@pytest.mark.new_interpreters  # an experiment's command trial from a real interpreter
def test_command_entrypoint_runs_the_script_in_the_model_dir(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """script.yaml: `python3 -m determined.launch.torch_distributed python3 train.py --batches 6`."""
    before = project_files()
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment",
        str(PROJECT / "script.yaml"),
        str(PROJECT),
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)
    validations = read_validation_log(log)
    assert [v["batches"] for v in validations] == [4, 6]  # train.py's own periods
    checkpoints = list(
        (experiment_dir(checkpoint_dir, PROJECT / "script.yaml") / "trial-1").iterdir()
    )
    # The config seeds nothing, so either validation may be the better one. Determined's default
    # retention keeps the trial's best and its latest: one checkpoint when batch 6 validated
    # better than batch 4, else the best (4) and the latest (6).
    improved = validations[1]["validation_loss"] < validations[0]["validation_loss"]
    assert len(checkpoints) == (1 if improved else 2), (validations, checkpoints)
    row = re.search(r"^1\s+COMPLETED\s.*\s(\S+)$", result.stdout, re.M)
    trial_dir = experiment_dir(checkpoint_dir, PROJECT / "script.yaml") / "trial-1"
    assert row and _shows(row.group(1), trial_dir), output(result)
    assert project_files() == before


@pytest.mark.slow
@pytest.mark.new_interpreters
def test_a_command_trials_summary_names_its_best_checkpoint_not_its_newest(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """script.yaml at learning rate 2.0 diverges: batch 4 validates far better than batch 6.
    The summary's checkpoint for the trial, and its "best:" line, name batch 4's checkpoint
    (Determined's best checkpoint is the searcher metric's), not the newest."""
    config = yaml.safe_load((PROJECT / "script.yaml").read_text())
    config["hyperparameters"]["learning_rate"] = 2.0
    path = isolated_run / "diverging.yaml"
    path.write_text(yaml.safe_dump(config))
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment", str(path), str(PROJECT), cwd=isolated_run, env={VALIDATION_LOG_ENV: str(log)}
    )
    assert result.returncode == 0, output(result)
    first, second = read_validation_log(log)
    assert first["validation_loss"] < second["validation_loss"], (first, second)
    trial_dir = experiment_dir(checkpoint_dir, path) / "trial-1"
    steps = {
        p.name: json.loads((p / "metadata.json").read_text())["steps_completed"]
        for p in trial_dir.iterdir()
    }
    assert sorted(steps.values()) == [4, 6]  # the best and the latest
    row = re.search(r"^1\s+COMPLETED\s.*\s(\S+)$", result.stdout, re.M)
    best_line = re.search(r"^best: trial 1 .*checkpoint (\S+)$", result.stdout, re.M)
    assert row and best_line, output(result)
    for cell in (row.group(1), best_line.group(1)):
        [named] = [n for n in steps if cell == f"trial-1/{n}" or n.startswith(cell)]
        assert steps[named] == 4, (cell, steps)


@pytest.mark.slow
@pytest.mark.new_interpreters
@pytest.mark.parametrize("searcher", ["single", "random"])
def test_a_trial_that_ends_well_without_the_searcher_metric_is_completed_unranked(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, searcher: str
) -> None:
    """A trial that reports no validation of searcher.metric (here a Core API loop reporting
    another metric; a Trainer trial stopped before its first validation alike). Determined
    completes such a trial; it was shown ERROR with no word why, and the experiment exited 1
    (a new-user audit). Now it is COMPLETED, unranked, and the log says why."""
    project = isolated_run / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "from det_lightning import core\n"
        "with core.init() as core_context:\n"
        "    core_context.train.report_validation_metrics(1, {'test_loss': 0.5})\n"
        "    assert not core_context.preempt.should_preempt()\n"
    )
    config = {
        "name": "core-api",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": 0.1 if searcher == "single" else {"type": "const", "val": 0.1}},
        "searcher": {"name": searcher, "metric": "validation_loss", "max_length": {"batches": 1}}
        | ({"max_trials": 2} if searcher == "random" else {}),
        "max_restarts": 0,
    }
    path = isolated_run / "core.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli("experiment", str(path), str(project), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    rows = re.findall(r"^(\d+)\s+(COMPLETED|ERROR)\s", result.stdout, re.M)
    assert rows == [(str(n), "COMPLETED") for n in range(1, len(rows) + 1)], output(result)
    assert len(rows) == (1 if searcher == "single" else 2)
    log = result.stdout + result.stderr
    note = re.findall(
        r"^(\w+): .*completed without a validation of searcher.metric 'validation_loss'(.*)$",
        log,
        re.M,
    )
    assert note, log
    if searcher == "single":  # one trial needs no ranking: a note, not a warning
        assert {level for level, _ in note} == {"INFO"}, log
        assert all(rest == ": no best metric to show." for _, rest in note), log
    else:
        assert {level for level, _ in note} == {"WARNING"}, log
        assert all("not among the trials ranked for the best" in rest for _, rest in note), log
    assert "a validation without searcher.metric 'validation_loss'" in log  # said at once


@pytest.mark.slow
@pytest.mark.new_interpreters
def test_a_failing_command_trials_log_holds_the_scripts_traceback(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """The failure line names the script's error and points at the trial's error.log, which
    holds the script's traceback, not det_lightning's own "its command failed" (a new-user
    audit found only that there). Each attempt adds its traceback."""
    project = isolated_run / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "def step():\n    raise ValueError('boom in the script')\n\nstep()\n"
    )
    config = {
        "name": "failing",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": 0.1},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}},
        "max_restarts": 1,
    }
    path = isolated_run / "failing.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli("experiment", str(path), str(project), cwd=isolated_run)
    assert result.returncode == 1, output(result)
    log_path = experiment_dir(checkpoint_dir, path) / "trial-1" / "error.log"
    lines = [line for line in result.stderr.splitlines() if "trial 1 failed: " in line]
    assert [line.split("trial 1 failed: ", 1)[1] for line in lines] == [
        "its command failed: ValueError: boom in the script; restart 1 of 1 from its latest "
        f"checkpoint (traceback in {log_path})",
        "its command failed: ValueError: boom in the script; no restarts left without it "
        f"(traceback in {log_path})",
    ], output(result)
    log = log_path.read_text()
    assert log.count("the trial's process (rank 0) raised") == 2, log
    assert log.count('train.py", line 2, in step') == 2, log
    assert "its command failed" not in log and "CommandFailed" not in log, log


CORE_ASHA_SCRIPT = """
import json
import os

import determined as det

info = det.get_cluster_info()
lr = info.trial.hparams["lr"]
with det.core.init() as core_context:
    epochs = 0
    if info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            epochs = json.loads((path / "state.json").read_text())["epochs"]
    losses, bests = [], []
    while epochs < 4:
        epochs += 1
        loss = lr / epochs  # the smaller the learning rate, the better at every rung
        core_context.train.report_validation_metrics(
            steps_completed=epochs * 10, metrics={"test_loss": loss, "epochs": epochs}
        )
        losses.append(loss)
        bests.append(core_context.train.get_experiment_best_validation())
        with core_context.checkpoint.store_path({"steps_completed": epochs * 10}) as (path, _):
            (path / "state.json").write_text(json.dumps({"epochs": epochs}))
        if core_context.preempt.should_preempt():
            break
    with open(os.environ["TRAINED_LOG"], "a") as log:
        log.write(json.dumps({"lr": lr, "epochs": epochs, "losses": losses, "bests": bests}) + "\\n")
"""


@pytest.mark.slow
@pytest.mark.new_interpreters
def test_a_core_api_loop_is_ranked_and_stopped_by_adaptive_asha(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """Determined's core_api_pytorch_mnist adaptive search, in small: the loop reports
    ``{"test_loss": ..., "epochs": ...}`` and checks ``should_preempt()`` each epoch. The search
    ranks its validations at the rungs (by the reported epochs) and stops the trials it ranks
    out through ``should_preempt()``; they end STOPPED EARLY, as under Determined's master."""
    project = isolated_run / "project"
    project.mkdir()
    (project / "model_def.py").write_text(CORE_ASHA_SCRIPT)
    config = {
        "name": "core-asha",
        "entrypoint": "python3 model_def.py",
        "hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}},
        "searcher": {
            "name": "adaptive_asha",
            "metric": "test_loss",
            "time_metric": "epochs",
            "max_time": 4,
            "max_trials": 6,
            "max_rungs": 2,
            "divisor": 2,
            "max_concurrent_trials": 1,
        },
        "reproducibility": {"experiment_seed": 7},
        "max_restarts": 0,
    }
    path = isolated_run / "core-asha.yaml"
    path.write_text(yaml.safe_dump(config))
    log = isolated_run / "trained.jsonl"
    result = run_cli(
        "experiment", str(path), str(project), cwd=isolated_run, env={"TRAINED_LOG": str(log)}
    )
    assert result.returncode == 0, output(result)
    trained = [json.loads(line) for line in log.read_text().splitlines()]
    rows = re.findall(r"^(\d+)\s+(COMPLETED|STOPPED EARLY at rung \d|ERROR)\s", result.stdout, re.M)
    states = [state for _, state in rows]
    assert len(trained) == len(rows) == 6, output(result)
    assert "ERROR" not in states and "core.init() in a search's trial" not in result.stderr
    # A trial ranked out at the first rung (2 epochs of 4) trained 2 epochs and stopped there.
    stopped = [t for t in trained if t["epochs"] < 4]
    assert stopped and all(t["epochs"] == 2 for t in stopped), (trained, output(result))
    assert states.count("STOPPED EARLY at rung 0") == len(stopped), output(result)
    assert states.count("COMPLETED") == 6 - len(stopped), output(result)
    # The batches column: what each trial's newest checkpoint holds (10 steps an epoch), not
    # the epochs its validations counted.
    shown = re.findall(
        r"^\d+\s+(?:COMPLETED|STOPPED EARLY at rung \d)\s+\S+\s+(\d+)\s", result.stdout, re.M
    )
    assert sorted(int(b) for b in shown) == sorted(t["epochs"] * 10 for t in trained), output(
        result
    )
    # get_experiment_best_validation(): the best test_loss any trial reported so far (the
    # trials ran one at a time, in the log's order), as Determined's master answers it.
    reported: list = []
    for t in trained:
        for loss, best in zip(t["losses"], t["bests"]):
            reported.append(loss)
            assert best == min(reported), (t, reported)
    # Every promoted trial beat the trials ranked out before it: a smaller learning rate.
    assert min(t["lr"] for t in trained) == min(t["lr"] for t in trained if t["epochs"] == 4)
    best = min(t["lr"] for t in trained) / 4
    assert re.search(rf"^best: trial \d+ \(test_loss={best:.4g}\)", result.stdout, re.M), output(
        result
    )


# ----- configuration errors: before any training, naming the key -----------------------------


def _write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "searcher: {name: single, metric: validation_loss, max_length: {batches: 4}}\n",
            "entrypoint: required key is missing",
        ),
        (
            "entrypoint: model_def:RegressionTrial\n"
            "searcher: {name: single, metric: validation_loss, max_length: {steps: 4}}\n",
            # steps (of batches_per_step batches) are from configs before Determined 0.12
            "searcher.max_length.steps: this key is from Determined's experiment configs before 0.12",
        ),
        (
            "entrypoint: model_def:RegressionTrial\n"
            "searcher: {name: single, metric: validation_loss, max_length: 4}\n",
            "searcher.max_length: 4 has no unit",
        ),
        (
            "entrypoint: model_def:RegressionTrial\n"
            "searcher: {name: single, metric: validation_loss, max_length: {records: 64}}\n",
            "searcher.max_length.records: converting records to batches needs",
        ),
        (
            "entrypoint: model_def:RegressionTrial\n"
            "searcher: {name: adaptive_asha, metric: validation_loss, max_trials: 4}\n",
            "searcher: adaptive_asha needs time_metric and max_time",
        ),
    ],
)
def test_config_errors_name_the_key_and_exit_2(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, text: str, expected: str
) -> None:
    """In process: these fail while planning, before anything is imported as ``determined``."""
    config = _write(tmp_path, text)
    assert _cli.main(["experiment", str(config), str(PROJECT)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"det-lightning experiment: error: {config}: "), err
    assert expected in err
    assert not compat.is_installed()


def test_config_errors_exit_the_process_with_2(isolated_run: pathlib.Path) -> None:
    misspelled = _write(
        isolated_run,
        (
            "entrypoint: model_def:RegressionTrial\n"
            "searcher: {name: single, metric: validation_loss, max_length: {batches: 4}}\n"
            "min_validaton_period: {batches: 2}\n"
        ),
    )
    result = run_cli("experiment", str(misspelled), str(PROJECT), cwd=isolated_run)
    assert result.returncode == 2, output(result)
    assert "min_validaton_period: unknown key. Did you mean 'min_validation_period'?" in (
        result.stderr
    )
    missing_class = _write(
        isolated_run,
        (
            "entrypoint: model_def:NoSuchTrial\n"
            "searcher: {name: single, metric: validation_loss, max_length: {batches: 4}}\n"
        ),
    )
    result = run_cli("experiment", str(missing_class), str(PROJECT), cwd=isolated_run)
    assert result.returncode == 2, output(result)
    assert "entrypoint: 'model_def:NoSuchTrial': model_def has no attribute 'NoSuchTrial'" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


# ----- planning: pure functions, in process ---------------------------------------------------


def test_plan_puts_checkpoints_where_checkpoint_storage_says(tmp_path: pathlib.Path) -> None:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "store"), "storage_path": "exp"}
    config = _config(checkpoint_storage=storage)
    plan = _plan.plan_experiment(load_config(config), PROJECT)
    assert plan.checkpoint_root == LocalStore(experiment_dir(tmp_path / "store" / "exp", config))
    assert plan.trial_class == "model_def:RegressionTrial" and plan.command is None
    overridden = _plan.plan_experiment(
        load_config(_config(checkpoint_storage=storage)),
        PROJECT,
        checkpoint_dir=str(tmp_path / "cli"),
    )
    assert overridden.checkpoint_root == LocalStore(experiment_dir(tmp_path / "cli", config))


def test_plan_defaults_to_the_environment_checkpoint_dir(checkpoint_dir: pathlib.Path) -> None:
    plan = _plan.plan_experiment(load_config(_config()), str(PROJECT), {"devices": None})
    assert plan.checkpoint_root == LocalStore(experiment_dir(checkpoint_dir, _config()))
    assert plan.launch == {}


def test_plan_of_adaptive_asha_and_a_missing_model_dir(tmp_path: pathlib.Path) -> None:
    asha = _config(
        searcher={
            "name": "adaptive_asha",
            "metric": "validation_loss",
            "max_trials": 16,
            "max_length": {"records": 8000},
        }
    )
    plan = _plan.plan_experiment(load_config(asha), PROJECT)
    assert plan.trials == []  # drawn as the search goes
    assert plan.search.time_metric == "batches" and plan.search.max_time == 1000
    assert [(b.num_rungs, b.max_trials) for b in plan.search.brackets] == [(3, 12), (2, 4)]
    with pytest.raises(_plan.UsageError, match="is not a directory"):
        _plan.plan_experiment(load_config(_config()), tmp_path / "missing")


def test_plan_of_a_grid_over_a_command_entrypoint() -> None:
    """A search's command trial gets its hyperparameters (det.get_cluster_info()), so a grid
    over a command entrypoint is a search of two trials, the last point's first (Determined
    creates trials from the end of its list, grid.go)."""
    grid = _config(
        entrypoint="python3 train.py",
        hyperparameters={"learning_rate": {"type": "categorical", "vals": [0.1, 0.2]}},
        searcher={"name": "grid", "metric": "validation_loss"},
    )
    plan = _plan.plan_experiment(load_config(grid), PROJECT)
    assert plan.command == ["train.py"] and plan.trial_class is None
    assert plan.trials == [{"learning_rate": 0.2}, {"learning_rate": 0.1}]
    assert plan.search.searcher == "grid" and plan.search.max_trials == 2
    assert plan.search.grid == ({"learning_rate": 1}, {"learning_rate": 0})
    assert [b.rung_units for b in plan.search.brackets] == [()]


@pytest.mark.parametrize(
    "entrypoint, expected",
    [
        ("python3 train.py --epochs 2", ["train.py", "--epochs", "2"]),
        (["python3", "train.py"], ["train.py"]),
        ("python3 -m determined.launch.torch_distributed python3 train.py", ["train.py"]),
        (
            "python3 -m determined.launch.torch_distributed -- python3 train.py -x",
            ["train.py", "-x"],
        ),
        ("python3 -m determined.launch.deepspeed --trial model_def:T", "model_def:T"),
        ("python3 -m determined.launch.horovod --autohorovod --trial=model_def:T", "model_def:T"),
        ("python -m mypackage.train --lr 1", ["-m", "mypackage.train", "--lr", "1"]),
        (f"{sys.executable} -u train.py", ["train.py"]),
    ],
)
def test_parse_command(entrypoint: object, expected: object) -> None:
    assert _harness.parse_command(entrypoint) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("entrypoint", ["bash run.sh", "python3 -c 'print(1)'", "train.py"])
def test_parse_command_refuses_non_python_commands(entrypoint: str) -> None:
    with pytest.raises(errors.InvalidConfigException, match="^entrypoint: .* is not run locally"):
        _harness.parse_command(entrypoint)


def test_training_lengths_follow_the_harness() -> None:
    config = load_config(
        _config(
            searcher={
                "name": "single",
                "metric": "validation_loss",
                "max_length": {"records": 100},
            },
            min_validation_period={"epochs": 2},
            scheduling_unit=7,
        )
    )
    lengths = config.lengths.fit_lengths({"global_batch_size": 8})
    assert lengths["max_length"] == Batch(12)  # 100 records // 8
    assert lengths["validation_period"] == Epoch(2)
    assert lengths["checkpoint_period"] == Batch(sys.maxsize)  # 0: never
    assert lengths["reporting_period"] == Batch(7)
    epochs = load_config(
        _config(
            searcher={"name": "single", "metric": "validation_loss", "max_length": {"epochs": 3}}
        )
    )
    assert epochs.lengths.fit_lengths({})["max_length"] == Epoch(3)
    with pytest.raises(errors.InvalidConfigException, match="global_batch_size >= 1, got None"):
        config.lengths.fit_lengths({})
    missing = load_config(_config(searcher={"name": "single", "metric": "validation_loss"}))
    with pytest.raises(errors.InvalidConfigException, match="^searcher.max_length: required"):
        missing.lengths.fit_lengths({})


def test_launch_options_from_slots_per_trial() -> None:
    two = load_config(_config(resources={"slots_per_trial": 2}))
    assert _plan.launch_options(two, {}) == {"devices": 2}
    assert _plan.launch_options(two, {"devices": 1, "precision": None}) == {"devices": 1}
    assert _trial.launch_flags({"devices": 2, "num_nodes": 1}) == [
        "--devices",
        "2",
        "--num-nodes",
        "1",
    ]


def test_summary_picks_the_best_completed_trial() -> None:
    rows = [
        _trial.TrialResult(1, {"lr": 0.1, "net": {"width": 4}}, "COMPLETED", 0.5, None),
        _trial.TrialResult(2, {"lr": 0.01, "net": {"width": 8}}, "ERROR"),
        _trial.TrialResult(
            3, {"lr": 0.001, "net": {"width": 8}}, "COMPLETED", 0.75, pathlib.Path("/c/trial-3/x")
        ),
    ]
    lower = _experiment.format_summary(rows, "loss", smaller_is_better=True)
    assert "lr=0.01, net.width=8" in lower
    assert lower.splitlines()[-1] == "best: trial 1 (loss=0.5), checkpoint -"
    higher = _experiment.format_summary(rows, "accuracy", smaller_is_better=False)
    assert higher.splitlines()[-1] == "best: trial 3 (accuracy=0.75), checkpoint /c/trial-3/x"
    under_c = _experiment.format_summary(rows, "accuracy", False, root=pathlib.Path("/c"))
    assert under_c.splitlines()[-2:] == [
        "checkpoints under /c",
        "best: trial 3 (accuracy=0.75), checkpoint trial-3/x",
    ]
    assert _experiment.best_trial(rows[1:2], True) is None


@pytest.mark.slow
def test_save_experiment_best_keeps_the_best_checkpoint_of_all_trials(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """Two trials checkpointing every 2 of 8 batches, ``checkpoint_storage`` keeping each
    trial's newest and the experiment's best: what is left is each trial's newest checkpoint
    and the one with the lowest validation loss of all."""
    import json

    import yaml

    config = _config(
        hyperparameters={
            "global_batch_size": 8,
            "hidden_size": 4,
            "learning_rate": {"type": "categorical", "vals": [0.05, 3.0]},
        },
        searcher={"name": "grid", "metric": "validation_loss", "max_length": {"batches": 8}},
        min_validation_period={"batches": 2},
        min_checkpoint_period={"batches": 2},
        checkpoint_policy="all",
        checkpoint_storage={
            "type": "shared_fs",
            "host_path": str(checkpoint_dir),
            "save_experiment_best": 1,
            "save_trial_best": 0,
            "save_trial_latest": 1,
        },
    )
    path = isolated_run / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment", str(path), str(PROJECT), cwd=isolated_run, env={VALIDATION_LOG_ENV: str(log)}
    )
    assert result.returncode == 0, output(result)

    lines = read_validation_log(log)
    assert [v["batches"] for v in lines] == [2, 4, 6, 8] * 2
    # Determined creates a grid's last point first: trial 1 has lr 3.0, which diverges: that
    # trial's best is not its newest, and not the experiment's best.
    assert [v["hparams"]["learning_rate"] for v in lines] == [3.0] * 4 + [0.05] * 4
    diverging = [v["validation_loss"] for v in lines[:4]]
    assert min(diverging) < diverging[-1]
    best_index = min(range(len(lines)), key=lambda i: lines[i]["validation_loss"])
    best_trial, best_batches = 1 + best_index // 4, lines[best_index]["batches"]
    left = {}
    for n in (1, 2):
        for checkpoint in (experiment_dir(checkpoint_dir, config) / f"trial-{n}").iterdir():
            if checkpoint.name == "experiment.json":
                continue
            metadata = json.loads((checkpoint / "metadata.json").read_text())
            left[(n, metadata["steps_completed"])] = checkpoint
    assert set(left) == {(1, 8), (2, 8), (best_trial, best_batches)}


@pytest.mark.parametrize("searcher", ["single", "grid"])
def test_invalid_hp_is_an_early_exit_not_an_error(
    isolated_run: pathlib.Path, searcher: str
) -> None:
    """``single`` (Determined: the trial exits early, the experiment completes, exit 0) and
    ``grid`` (the point is dropped, not replaced; the log says so)."""
    import shutil

    import yaml

    project = isolated_run / "project"
    shutil.copytree(PROJECT, project)
    (project / "picky_def.py").write_text(INVALID_TRIAL)
    sizes: object = 8 if searcher == "single" else {"type": "categorical", "vals": [2, 8]}
    config = _config(
        entrypoint="picky_def:PickyTrial",
        hyperparameters={"global_batch_size": 8, "learning_rate": 0.05, "hidden_size": sizes},
        searcher={"name": searcher, "metric": "validation_loss", "max_length": {"batches": 2}},
    )
    path = isolated_run / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli("experiment", str(path), str(project), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    assert "InvalidHP (hidden_size 8 is not allowed)" in result.stderr
    assert "another trial replaces it" not in result.stderr
    if searcher == "single":
        assert re.search(r"^1\s+INVALID HP\s+", result.stdout, re.M), output(result)
        assert "InvalidHP detected during Trial init, converting InvalidHP to exit(0)" in (
            result.stderr
        )
    else:
        assert "the trial is dropped: a grid does not replace its point" in result.stderr
        assert re.findall(r"^(\d+)\s+COMPLETED\s", result.stdout, re.M) == ["2"], output(result)
