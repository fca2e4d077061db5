"""``det-lightning experiment`` with an ``adaptive_asha`` searcher, on Optuna.

The fixture project's ``asha.yaml``: 6 trials, rungs at 2, 4 and 8 batches (divisor 2, one
aggressive bracket). Runs go through child processes, as a user starts them; the tests then read
the search back from its Optuna journal.
"""

import math
import pathlib
import re

import optuna
import pytest

from tests.integration.cli_support import (
    INVALID_TRIAL,
    PROJECT,
    VALIDATION_LOG_ENV,
    experiment_dir,
    output,
    read_validation_log,
    run_cli,
)
from tests.integration.search_support import (
    GRID,
    GRID_ORDER,
    barrier,
    check_search,
    checkpoint_steps,
    experiment_of,
    grid_points,
    journal_of,
    number_of,
    read_trials,
    slow_config,
    slow_grid_config,
    slow_project,  # noqa: F401 (a fixture)
    start_and_kill_at_batch,
    start_search,
)
from tests.unit.test_search_dashboard import fake_dashboard
from tests.unit.test_search_tensorboard import read_hparams_view

pytestmark = pytest.mark.slow

CONFIG = str(PROJECT / "asha.yaml")


def test_an_adaptive_asha_search_stops_trials_by_determineds_rule_and_reruns_as_done(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    result = run_cli("experiment", CONFIG, str(PROJECT), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    check_search(checkpoint_dir, read_trials(journal_of(checkpoint_dir)))
    rows = [line for line in result.stdout.splitlines() if line[:1].isdigit()]
    states = {
        number_of(t): (
            "COMPLETED"
            if t.state == optuna.trial.TrialState.COMPLETE
            else f"STOPPED EARLY at rung {t.user_attrs['rung']}"
        )
        for t in read_trials(journal_of(checkpoint_dir))
    }
    assert [re.split(r"\s{2,}", row)[:2] for row in rows] == [
        [str(n), states[n]] for n in sorted(states)
    ], output(result)

    again = run_cli("experiment", CONFIG, str(PROJECT), cwd=isolated_run)
    assert again.returncode == 0, output(again)
    assert len(read_trials(journal_of(checkpoint_dir))) == 6  # finished: nothing runs twice


@pytest.mark.new_interpreters  # a SIGKILL drill: the search CLI as a real interpreter
def test_a_search_killed_mid_trial_continues_when_rerun(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    """SIGKILL while the first trial trains past its second rung (it has a checkpoint at 4
    batches or later); rerunning the command resumes it from that checkpoint and finishes the
    search, every trial run once."""
    start_and_kill_at_batch(isolated_run, slow_project, 4)  # past rung 1
    journal = journal_of(checkpoint_dir)
    running = [t for t in read_trials(journal) if t.state == optuna.trial.TrialState.RUNNING]
    assert len(running) == 1 and running[0]._trial_id == 0, "not killed inside trial 1"
    rerun = start_search(isolated_run, slow_project)
    out = rerun.communicate(timeout=240)[0]
    assert rerun.returncode == 0, out
    assert (
        "trial 1 (bracket 0, rungs at [2, 4, 8] batches) resumed from its latest checkpoint" in out
    ), out
    assert "resuming from" in out  # from trial 3's checkpoint, not from batch 0
    check_search(checkpoint_dir, read_trials(journal))


def test_two_workers_share_one_search(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    journal = isolated_run / "shared.journal"
    env = barrier(isolated_run, 2)
    workers = [
        start_search(isolated_run, slow_project, "--storage", str(journal), env=env)
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=240)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    trials = read_trials(journal, checkpoint_dir)  # a surplus trial has no folder there
    check_search(checkpoint_dir, trials, replay=False)
    pids = {t.user_attrs["pid"] for t in trials}
    assert len(pids) == 2  # both workers trained trials of the one search


def test_invalid_hp_trials_are_dropped_and_replaced(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    (slow_project / "picky_def.py").write_text(INVALID_TRIAL)
    config = (
        (slow_project / "asha.yaml")
        .read_text()
        .replace("slow_def:SlowTrial", "picky_def:PickyTrial")
    )
    (slow_project / "asha.yaml").write_text(config)
    process = start_search(isolated_run, slow_project)
    out = process.communicate(timeout=240)[0]
    assert process.returncode == 0, out
    trials = read_trials(journal_of(checkpoint_dir))
    invalid = [t for t in trials if t.user_attrs.get("invalid_hp")]
    valid = [t for t in trials if not t.user_attrs.get("invalid_hp")]
    assert invalid and all(t.user_attrs["hparams"]["hidden_size"] == 8 for t in invalid)
    assert all(t.state == optuna.trial.TrialState.FAIL for t in invalid)
    assert len(valid) == 6 and all(t.user_attrs["hparams"]["hidden_size"] == 2 for t in valid)
    assert "InvalidHP (hidden_size 8 is not allowed)" in out
    summary = [
        line
        for line in out.splitlines()
        if line[:1].isdigit() and re.match(r"\d+\s+(COMPLETED|STOPPED EARLY at rung \d)\s", line)
    ]
    assert len(summary) == 6  # dropped trials are not listed


def test_a_command_entrypoint_trial_gets_its_hparams_and_reports_to_the_search(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """``entrypoint: python3 train.py``: each trial is a child process whose script takes its
    cluster branch (``det.get_cluster_info().trial.hparams``, ``fit(max_length=None)`` from the
    searcher) and whose validations rank it in the search."""
    config = (
        (PROJECT / "asha.yaml").read_text().replace("model_def:RegressionTrial", "python3 train.py")
    )
    path = isolated_run / "command.yaml"
    path.write_text(config)
    result = run_cli("experiment", str(path), str(PROJECT), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    trials = read_trials(journal_of(checkpoint_dir))
    assert len(trials) == 6
    for trial in trials:
        assert trial.user_attrs["rungs"], trial.number  # reported from the child process
        stopped = trial.state == optuna.trial.TrialState.PRUNED
        assert stopped == bool(trial.user_attrs.get("stopped"))
        # train.py validates every 4 batches: a trial ranked out stops at its 4th batch.
        assert max(trial.intermediate_values) == (4 if stopped else 8)
        number = number_of(trial)
        assert f"hidden_size={trial.user_attrs['hparams']['hidden_size']}" in result.stdout
        assert (experiment_of(checkpoint_dir) / f"trial-{number}").is_dir()
    assert any(t.state == optuna.trial.TrialState.PRUNED for t in trials)


def test_workers_flag_runs_trials_at_once_and_prints_one_summary(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    process = start_search(
        isolated_run, slow_project, "--workers", "2", env=barrier(isolated_run, 2)
    )
    out = process.communicate(timeout=240)[0]
    assert process.returncode == 0, out
    assert "2 workers share this search" in out
    trials = read_trials(journal_of(checkpoint_dir))
    check_search(checkpoint_dir, trials, replay=False)
    assert len({t.user_attrs["pid"] for t in trials}) == 2
    assert out.count("best: trial") == 1  # the summary, printed once when all are done
    assert out.count("trial(s), searcher adaptive_asha; checkpoints under") == 1, out
    # Its wall time is the workers' (not the summary's own fraction of a second).
    shown = re.search(r"^wall time (?:(\d+) min )?([\d.]+) s$", out, re.M)
    assert shown, out
    wall_s = 60 * int(shown.group(1) or 0) + float(shown.group(2))
    trained = max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)
    assert wall_s >= trained.total_seconds() - 0.1, out


def test_determineds_mnist_adaptive_config_runs_end_to_end(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """examples/mnist/adaptive.yaml (Determined's tutorial config, its command entrypoint
    ``python3 train.py --epochs 1``), shrunk to 4 trials of one 16-batch epoch."""
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "mnist"
    config = (example / "adaptive.yaml").read_text()
    config = config.replace("max_trials: 16", "max_trials: 4")
    config = config.replace("max_time: 64", "max_time: 16")
    path = isolated_run / "adaptive.yaml"
    path.write_text(config + "reproducibility:\n  experiment_seed: 1\n")
    project = isolated_run / "mnist"
    project.mkdir()
    for name in ("model_def.py", "data.py"):
        (project / name).write_text((example / name).read_text())
    # One 16-batch epoch of 1,024 images; validation every 8 batches.
    (project / "train.py").write_text(
        (example / "train.py")
        .read_text()
        .replace("validation_period=pytorch.Batch(32)", "validation_period=pytorch.Batch(8)")
    )
    (project / "data.py").write_text(
        (example / "data.py")
        .read_text()
        .replace(
            "size = size or (4096 if train else 1024)", "size = size or (1024 if train else 256)"
        )
    )
    result = run_cli("experiment", str(path), str(project), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    trials = read_trials(journal_of(checkpoint_dir))
    assert len(trials) == 4
    assert all(
        t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        for t in trials
    )
    assert all(8 <= t.user_attrs["hparams"]["n_filters1"] <= 64 for t in trials)
    assert re.search(r"^best: trial \d+ \(validation_loss=", result.stdout, re.M), output(result)


# ----- grid and random: the same worker loop and storage --------------------------------------


def test_a_grid_search_runs_determineds_points_in_its_order_and_reruns_as_done(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "experiment", GRID, str(PROJECT), cwd=isolated_run, env={VALIDATION_LOG_ENV: str(log)}
    )
    assert result.returncode == 0, output(result)
    trials = read_trials(journal_of(checkpoint_dir))
    assert grid_points(trials) == GRID_ORDER
    assert [t.user_attrs["grid_point"] for t in sorted(trials, key=lambda t: t._trial_id)] == [
        0,
        1,
        2,
        3,
    ]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    lines = read_validation_log(log)
    assert [v["batches"] for v in lines] == [4, 8] * 4
    for trial in trials:  # each trial's reported validations are its study values
        number = number_of(trial)
        mine = lines[2 * (number - 1) : 2 * number]
        assert trial.intermediate_values == {
            4: pytest.approx(mine[0]["validation_loss"]),
            8: pytest.approx(mine[1]["validation_loss"]),
        }
        assert trial.value == pytest.approx(mine[1]["validation_loss"])
    rows = re.findall(
        r"^([1-4])\s+COMPLETED\s+learning_rate=(\S+), hidden_size=(\d)\s+8\s+\S+\s+(\S+)$",
        result.stdout,
        re.M,
    )
    assert [(int(h), round(float(lr), 6)) for _, lr, h, _ in rows] == GRID_ORDER, output(result)
    assert "\nevery trial: global_batch_size=8\n" in result.stdout, output(result)
    experiment = experiment_of(checkpoint_dir)
    for n, _, _, shown in rows:  # its checkpoint, by (the start of) its path under the root
        names = [f"trial-{n}/{p.name}" for p in (experiment / f"trial-{n}").iterdir()]
        assert any(name.startswith(shown) or name.split("/")[1].startswith(shown) for name in names)
    tensorboard = experiment_dir(isolated_run.parent / "tensorboard", GRID)
    for trial in trials:  # HParams: each trial's own run, beside its validation scalars
        run = tensorboard / f"trial-{number_of(trial)}"
        values, metrics, scalars = read_hparams_view(run)
        drawn = trial.user_attrs["hparams"]
        assert values == {
            "global_batch_size": 8,
            "hidden_size": drawn["hidden_size"],
            "learning_rate": pytest.approx(drawn["learning_rate"]),
        }
        assert metrics == ["Determined/validation_loss"] and metrics[0] in scalars

    # Rerun with --dashboard (a stand-in optuna-dashboard that records its arguments).
    record = fake_dashboard(isolated_run.parent / "fake", monkeypatch)
    again = run_cli(
        "experiment",
        "--dashboard",
        GRID,
        str(PROJECT),
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert again.returncode == 0, output(again)
    assert record.read_text().split() == [str(journal_of(checkpoint_dir))]
    assert "keeps serving; press Ctrl-C" in again.stderr
    assert len(read_trials(journal_of(checkpoint_dir))) == 4
    assert len(read_validation_log(log)) == 8  # finished: nothing trained again
    assert len(re.findall(r"^[1-4]\s+COMPLETED", again.stdout, re.M)) == 4


RANDOM_SEARCHER = """searcher:
  name: random
  metric: validation_loss
  max_trials: 3
  max_length:
    batches: 8
"""


def test_a_random_search_killed_mid_trial_resumes_it_and_runs_each_trial_once(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    slow_config(slow_project, RANDOM_SEARCHER)
    start_and_kill_at_batch(isolated_run, slow_project, 4)
    journal = journal_of(checkpoint_dir)
    (running,) = [t for t in read_trials(journal) if t.state == optuna.trial.TrialState.RUNNING]
    drawn = running.user_attrs["hparams"]
    rerun = start_search(isolated_run, slow_project)
    out = rerun.communicate(timeout=240)[0]
    assert rerun.returncode == 0, out
    assert (
        f"trial 1 (random) resumed from its latest checkpoint (its earlier run was interrupted, or its worker died): {drawn}"
        in out
    ), out
    assert "resuming from" in out
    trials = read_trials(journal)
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for trial in trials:
        assert -3 <= math.log10(trial.user_attrs["hparams"]["learning_rate"]) <= -0.5
        assert max(trial.intermediate_values) == 8
        newest = max(
            (
                p
                for p in (experiment_of(checkpoint_dir) / f"trial-{number_of(trial)}").iterdir()
                if not p.name.startswith(".")
            ),
            key=checkpoint_steps,
        )
        assert checkpoint_steps(newest) == 8


def test_two_workers_share_a_grid_search_each_point_once(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    slow_grid_config(slow_project)
    process = start_search(
        isolated_run, slow_project, "--workers", "2", env=barrier(isolated_run, 2)
    )
    out = process.communicate(timeout=240)[0]
    assert process.returncode == 0, out
    trials = read_trials(journal_of(checkpoint_dir))
    assert sorted(grid_points(trials)) == sorted(GRID_ORDER)
    assert sorted(t.user_attrs["grid_point"] for t in trials) == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["pid"] for t in trials}) == 2
    assert out.count("best: trial") == 1


def test_invalid_hp_from_a_command_entrypoint_drops_the_trial_and_replaces_it(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """``entrypoint: python3 train.py`` whose script raises ``det.InvalidHP`` for hidden_size 8
    (inside ``pytorch.init()``, as Determined's examples do): the trial's process records it
    and exits 0; the search drops the trial and draws another. Experiment seed 29 draws
    hidden_size 8, 8, 8, 2, 2 (as Determined's master would): three trials dropped, two
    run."""
    project = isolated_run / "project"
    project.mkdir()
    for name in ("model_def.py", "data.py", "const.yaml"):
        (project / name).write_text((PROJECT / name).read_text())
    (project / "train.py").write_text(
        (PROJECT / "train.py")
        .read_text()
        .replace(
            "        trial = model_def.RegressionTrial(train_context)",
            "        if hparams['hidden_size'] == 8:\n"
            "            raise det.InvalidHP('hidden_size 8 is not allowed')\n"
            "        trial = model_def.RegressionTrial(train_context)",
        )
    )
    config = (
        (PROJECT / "asha.yaml")
        .read_text()
        .split("searcher:")[0]
        .replace("model_def:RegressionTrial", "python3 train.py")
    )
    path = isolated_run / "command.yaml"
    path.write_text(
        config
        + RANDOM_SEARCHER.replace("max_trials: 3", "max_trials: 2")
        + "reproducibility:\n  experiment_seed: 29\n"
    )
    result = run_cli("experiment", str(path), str(project), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    trials = sorted(read_trials(journal_of(checkpoint_dir)), key=lambda t: t._trial_id)
    sizes = [t.user_attrs["hparams"]["hidden_size"] for t in trials]
    assert sizes == [8, 8, 8, 2, 2]  # seed 29's draws: three dropped, two replacing them run
    assert [t.user_attrs.get("invalid_hp") for t in trials] == [
        "hidden_size 8 is not allowed" if size == 8 else None for size in sizes
    ]
    assert [t.state.name for t in trials] == ["FAIL" if size == 8 else "COMPLETE" for size in sizes]
    assert "trial 1: InvalidHP (hidden_size 8 is not allowed)" in result.stderr
    rows = re.findall(r"^(\d+)\s+COMPLETED\s", result.stdout, re.M)
    assert rows == ["4", "5"], output(result)  # dropped trials are not listed


def test_a_searcher_metric_no_validation_returns_ends_the_search_naming_it(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """As in Determined, a ``searcher.metric`` the trial never reports ends the experiment with
    an error naming it, at the first validation, instead of failing trial after trial."""
    config = tmp_path / "missing_metric.yaml"
    config.write_text(
        (PROJECT / "asha.yaml").read_text().replace("metric: validation_loss", "metric: accuracy")
    )
    result = run_cli("experiment", str(config), str(PROJECT), cwd=isolated_run)
    assert result.returncode == 1, output(result)
    # One error line and the summary as it stands, not a traceback.
    assert "Traceback" not in result.stderr, output(result)
    error_lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert error_lines == [
        "det-lightning experiment: error: searcher.metric 'accuracy' is not among the "
        "validation metrics ['validation_loss']: the search cannot rank this trial. Return it "
        "from evaluate_batch (or evaluate_full_dataset), or change searcher.metric."
    ], output(result)
    summary = result.stdout.splitlines()
    assert summary[0].split()[:3] == ["trial", "status", "hyperparameters"], output(result)
    assert summary[1].split()[:2] == ["1", "ERROR"], output(result)
    assert len(read_trials(journal_of(checkpoint_dir))) == 1
