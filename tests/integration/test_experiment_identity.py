"""Experiments that never mix (issue 30): an id per experiment, a folder per experiment and
trial, one resume story for every searcher, restarts, and one trainer per experiment.

Each test starts ``det-lightning experiment`` processes; they are few and short.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Any, Dict

import optuna
import pytest
import torch
import yaml

from tests.fixtures.object_store import S3
from tests.integration.cli_support import PROJECT, experiment_dir, output, run_cli
from tests.integration.search_support import (
    journal_of,
    read_trials,
    slow_config,
    slow_project,  # noqa: F401  (a fixture)
    start_and_kill_at_batch,
    start_search,
    wait_while_running,
)

pytestmark = pytest.mark.slow

SINGLE = "searcher:\n  name: single\n  metric: validation_loss\n  max_length:\n    batches: 8\n"


def _config(name: str, lr: float, batches: int, **more: Any) -> Dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "model_def:RegressionTrial",
        "hyperparameters": {"global_batch_size": 8, "learning_rate": lr, "hidden_size": 4},
        "searcher": {
            "name": "single",
            "metric": "validation_loss",
            "max_length": {"batches": batches},
        },
        "min_validation_period": {"batches": 2},
        "reproducibility": {"experiment_seed": 3},
        **more,
    }


def _run(config: Dict[str, Any], workdir: pathlib.Path, project: pathlib.Path = PROJECT) -> str:
    path = workdir / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    # The advice to resume, which must never pick another experiment's checkpoint.
    env = {"DET_LIGHTNING_LATEST_CHECKPOINT": "latest"}
    result = run_cli("experiment", str(path), str(project), cwd=workdir, env=env)
    assert result.returncode == 0, output(result)
    return result.stdout + result.stderr


@pytest.mark.parametrize("store", ["disk", "bucket"])
def test_an_experiment_never_resumes_another_ones_checkpoint(
    isolated_run: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    request: pytest.FixtureRequest,
    store: str,
    capsys: pytest.CaptureFixture,
) -> None:
    """The issue's story: experiment B (lr 0.5, 6 batches), then A (lr 0.1, 4 batches), in one
    checkpoint folder (or bucket prefix), then A again: A trains its own 4 batches from batch 0
    and its rerun continues A, never B."""
    more: Dict[str, Any] = {}
    if store == "bucket":
        s3: S3 = request.getfixturevalue("s3_server")
        more["checkpoint_storage"] = {
            "type": "s3",
            "bucket": s3.bucket,
            "prefix": "team",
            "endpoint_url": s3.endpoint,
        }
    b, a = _config("b", 0.5, 6, **more), _config("a", 0.1, 4, **more)
    _run(b, isolated_run)
    first = _run(a, isolated_run)
    assert "resuming from" not in first, first
    again = _run(a, isolated_run)
    # One trial: its row (batches, best, the checkpoint's short id), its hyperparameters below.
    row = re.search(r"^1\s+COMPLETED\s+-\s+(\d+)\s+\S+\s+(\S+)$", again, re.M)
    assert row and row.group(1) == "4", again
    assert re.search(r"^hyperparameters: .*learning_rate=0.1$", again, re.M), again
    best = re.search(r"^best: trial 1 \(.*\), checkpoint (trial-1/(\S+))$", again, re.M)
    assert best and best.group(2).startswith(row.group(2)), again
    if store == "disk":
        own = experiment_dir(checkpoint_dir, a) / "trial-1"
        assert (own.parent / best.group(1)).is_dir(), again
        assert sorted(p.name for p in checkpoint_dir.iterdir()) == sorted(
            experiment_dir(checkpoint_dir, c).name for c in (a, b)
        )
        for path in own.iterdir():
            identity = json.loads((path / "metadata.json").read_text())["det_lightning_identity"]
            assert identity["experiment_id"] == own.parent.name and identity["trial"] == 1
            assert identity["hparams"]["learning_rate"] == 0.1
        _bookkeeping_lists_both(checkpoint_dir, own, capsys)
    else:
        under = f"s3://{s3.bucket}/team/{experiment_dir(pathlib.Path(), a)}"
        assert f"\ncheckpoints under {under}\n" in again, again
        assert any(k.endswith(f"/{best.group(1)}/metadata.json") for k in s3.keys("team"))
        assert {k.split("/")[0] for k in s3.keys("team")} == {
            str(experiment_dir(pathlib.Path(), c)) for c in (a, b)
        }
        _bookkeeping_reads_the_bucket(s3, str(experiment_dir(pathlib.Path(), a)), capsys)


def _bookkeeping_lists_both(
    root: pathlib.Path, own: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """``experiment list``, ``experiment describe ID`` and ``checkpoint list ID``, from the
    files (in this process: they import no trial code)."""
    from det_lightning._runner import cli

    capsys.readouterr()
    assert cli.main(["experiment", "list", "--checkpoint-dir", str(root)]) == 0
    listed = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:]}
    assert len(rows) == 2 and rows[own.parent.name][1:5] == ["a", "single", "COMPLETED", "1"]
    assert rows[own.parent.name][5].startswith("validation_loss=")
    assert cli.main(["experiment", "describe", own.parent.name, "--checkpoint-dir", str(root)]) == 0
    described = capsys.readouterr().out
    assert f"experiment {own.parent.name} (a): COMPLETED" in described
    assert re.search(r"^1\s+COMPLETED\s+-\s+4\s", described, re.M), described
    assert re.search(r"^hyperparameters: .*learning_rate=0.1$", described, re.M), described
    assert cli.main(["checkpoint", "list", own.parent.name, "--checkpoint-dir", str(root)]) == 0
    checkpoints = capsys.readouterr().out.splitlines()[1:]
    assert {line.split()[-1] for line in checkpoints} == {str(p) for p in own.iterdir()}
    assert all(line.split()[1] == "1" for line in checkpoints)


def _bookkeeping_reads_the_bucket(s3: S3, own: str, capsys: pytest.CaptureFixture) -> None:
    """``experiment list``, ``describe`` and ``checkpoint list`` with ``--checkpoint-dir
    s3://...``: the experiments' records and checkpoints read from the bucket, as the team
    that shares it would ask."""
    from det_lightning._runner import cli

    root = s3.url("team")
    capsys.readouterr()
    assert cli.main(["experiment", "list", "--checkpoint-dir", root]) == 0
    listed = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:]}
    assert len(rows) == 2 and rows[own][1:5] == ["a", "single", "COMPLETED", "1"], listed
    assert cli.main(["experiment", "describe", own, "--checkpoint-dir", root]) == 0
    described = capsys.readouterr().out
    assert f"experiment {own} (a): COMPLETED" in described, described
    assert f"files in {root}/{own}\n" in described, described
    assert re.search(r"^1\s+COMPLETED\s+-\s+4\s", described, re.M), described
    assert cli.main(["checkpoint", "list", own, "--checkpoint-dir", root]) == 0
    checkpoints = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    marked = {k.split("/")[-2] for k in s3.keys(f"team/{own}/trial-1") if k.endswith(".complete")}
    assert marked and {row[2] for row in checkpoints} == marked, checkpoints
    assert all(row[-1] == f"{root}/{own}/trial-1/{row[2]}" for row in checkpoints), checkpoints


def test_a_single_experiment_continues_when_rerun(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    """Killed mid-trial, a ``single`` experiment's rerun (the same command, nothing set)
    resumes its trial from its latest checkpoint, as a search's does."""
    slow_config(slow_project, SINGLE)
    start_and_kill_at_batch(isolated_run, slow_project, 4)
    rerun = start_search(isolated_run, slow_project)
    out = rerun.communicate(timeout=240)[0]
    assert rerun.returncode == 0, out
    assert re.search(r"resuming from \S+/trial-1/\S+ at batch 4", out), out
    assert re.search(r"^1\s+COMPLETED\s+.*\s8\s+[\d.e+-]+\s+\S+$", out, re.M), out
    (trial,) = read_trials(journal_of(checkpoint_dir))
    assert trial.state == optuna.trial.TrialState.COMPLETE


def _files(folder: pathlib.Path) -> Dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in folder.rglob("*") if f.is_file()}


def test_a_rerun_in_another_search_storage_is_refused(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """Rerun without the ``--storage`` it began with (or with another), an experiment's search
    started over in an empty storage: its trials resumed past the rungs and decisions it no
    longer knew, and the summary reported a search that never ran. The rerun is refused,
    naming the storage it began with; nothing is written; with that storage it continues. Its
    search without its folder (another ``--checkpoint-dir``, a folder deleted by hand) is
    refused too."""
    config = _config("stored", 0.1, 4)
    path = isolated_run / "stored.yaml"
    path.write_text(yaml.safe_dump(config))
    began = f"sqlite:///{isolated_run / 'search.db'}"

    def run(*storage: str) -> subprocess.CompletedProcess:
        return run_cli("experiment", str(path), str(PROJECT), *storage, cwd=isolated_run)

    first = run("--storage", began)
    assert first.returncode == 0, output(first)
    folder = experiment_dir(checkpoint_dir, config)
    assert json.loads((folder / "experiment.json").read_text())["storage"] == began
    before = _files(folder)
    other = isolated_run / "other.db"
    for storage, here in (
        ((), str(folder / "search.journal")),
        (("--storage", f"sqlite:///{other}"), f"sqlite:///{other}"),
    ):
        refused = run(*storage)
        assert refused.returncode == 2, output(refused)
        said = " ".join(output(refused).split())
        assert f"experiment {folder.name} has 1 trial folder(s) in {folder}" in said, said
        assert f"its search is not in {here}" in said or f"not in the journal {here}" in said
        assert f"It began with --storage {began}: rerun with that" in said, said
    assert _files(folder) == before and not other.exists()  # no journal, database, record
    again = run("--storage", began)
    assert again.returncode == 0, output(again)
    assert re.search(r"^1\s+COMPLETED\s+-\s+4\s", output(again), re.M), output(again)
    assert "resuming from" not in output(again), output(again)  # done: nothing trained

    # The other way round: its search there, its folder not (another --checkpoint-dir, or a
    # folder deleted without its studies). It reported the search done, its best checkpoint
    # in the other folder.
    elsewhere = isolated_run / "elsewhere"
    moved = run("--storage", began, "--checkpoint-dir", str(elsewhere))
    shutil.rmtree(folder)
    deleted = run("--storage", began)
    for refused in (moved, deleted):
        assert refused.returncode == 2, output(refused)
        said = " ".join(output(refused).split())
        assert f"experiment {folder.name}'s search in {began} has 1 trial(s), but" in said, said
        assert "rerun with the --checkpoint-dir it began with" in said, said
    assert not elsewhere.exists() and not folder.exists()
    for name in optuna.get_all_study_names(began):  # as the message says: then it starts over
        optuna.delete_study(study_name=name, storage=began)
    over = run("--storage", began)
    assert over.returncode == 0 and "resuming from" not in output(over), output(over)
    assert re.search(r"^1\s+COMPLETED\s+-\s+4\s", output(over), re.M), output(over)

    (isolated_run / "search.db").unlink()  # the storage lost the search
    lost = run("--storage", began)
    assert lost.returncode == 2, output(lost)
    assert "Its storage no longer holds it" in " ".join(output(lost).split()), output(lost)


def test_a_rerun_with_an_edited_config_says_what_changed(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """An experiment's id comes from its name, hyperparameters, searcher and entrypoint: a
    rerun with other periods continues it (Determined made a new experiment). It says which
    keys changed since the experiment last ran, once; activate() reruns the latest config."""
    from det_lightning.experimental import client

    config = _config("edited", 0.1, 4)
    path = isolated_run / "edited.yaml"
    path.write_text(yaml.safe_dump(config))

    def run(*more: str) -> str:
        result = run_cli("experiment", str(path), str(PROJECT), *more, cwd=isolated_run)
        assert result.returncode == 0, output(result)
        return " ".join(output(result).split())

    said = "with a config changed since it last ran:"
    assert said not in run()
    override = ("--config", "min_validation_period.batches=1", "--config", "labels=[a]")
    assert f"{said} labels, min_validation_period.batches. To begin a new" in run(*override)
    assert said not in run(*override)  # as it last ran
    assert f"{said} labels, min_validation_period.batches." in run()
    run(*override)
    folder = experiment_dir(checkpoint_dir, config)
    launch = json.loads((folder / "launch.json").read_text())
    assert launch["config"]["min_validation_period"] == {"batches": 1}
    record = json.loads((folder / "experiment.json").read_text())
    assert record["config"]["min_validation_period"] == {"batches": 2}  # the first, kept
    experiment = client.Determined(checkpoint_dir=str(checkpoint_dir)).get_experiment(folder.name)
    command, _ = experiment._command_from_record()  # what activate() runs
    rerun = yaml.safe_load(pathlib.Path(command[-2]).read_text())  # CONFIG MODEL_DIR last
    assert rerun["min_validation_period"] == {"batches": 1} and rerun["labels"] == ["a"]


def test_the_same_experiment_started_twice_trains_once(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    """The second start joins the first as a worker: it names the trial the first one trains
    (its pid and host), trains nothing, and reports the experiment once that trial is done."""
    slow_config(slow_project, SINGLE)
    started, go = isolated_run / "started", isolated_run / "go"
    started.mkdir()
    env = {"TEST_BARRIER_DIR": str(started), "TEST_BARRIER_COUNT": "1", "TEST_WAIT_FOR": str(go)}
    first = start_search(isolated_run, slow_project, env=env)
    try:
        wait_while_running(
            lambda: any(started.iterdir()), first, "the first start's trial to train"
        )
        log = isolated_run / "second.log"
        with log.open("w") as out:
            second = subprocess.Popen(
                [sys.executable, "-m", "det_lightning", "experiment"]
                + [str(slow_project / "asha.yaml"), str(slow_project)],
                cwd=isolated_run,
                env=dict(os.environ, OMP_NUM_THREADS="1", **env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_while_running(
            lambda: "running in another worker" in log.read_text(), second, "the second"
        )
        go.touch()
        assert second.wait(timeout=240) == 0, log.read_text()
        first_out = first.communicate(timeout=240)[0]
        assert first.returncode == 0, first_out
    finally:
        for process in (first, locals().get("second")):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    joined = log.read_text()
    assert f"trial 1 (pid {first.pid} on " in joined, joined
    assert "trial 1 (single)" not in joined  # it never started the trial
    assert re.search(r"^1\s+COMPLETED\s", joined, re.M), joined
    assert len(list(started.iterdir())) == 1  # one trial process trained
    assert len(read_trials(journal_of(checkpoint_dir))) == 1


FLAKY = """
import os, pathlib
from model_def import RegressionTrial


class FlakyTrial(RegressionTrial):
    \"\"\"Fails at batch 3 ("once": the first time; "always": every time).\"\"\"

    def train_batch(self, batch, epoch_idx, batch_idx):
        mode = self.context.get_hparam("fail")
        marker = pathlib.Path(os.environ["TEST_FAILED_MARKER"] + mode)
        if batch_idx == 3 and mode != "never" and (mode == "always" or not marker.exists()):
            marker.touch()
            raise RuntimeError(f"failing at batch 3 ({mode})")
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def test_a_failing_trial_restarts_from_its_own_checkpoint_max_restarts_times(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial failing once after its checkpoint at batch 2 restarts from it and ends with the
    weights of a run that never failed; one failing every time ends ERROR after max_restarts."""
    project = isolated_run / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    (project / "flaky_def.py").write_text(FLAKY)
    monkeypatch.setenv("TEST_FAILED_MARKER", str(isolated_run / "failed-"))
    common = {
        "entrypoint": "flaky_def:FlakyTrial",
        "min_checkpoint_period": {"batches": 2},
        "checkpoint_policy": "none",
    }
    # The same grid, failing never: its trial at the place of `once` draws the same seed.
    baseline = _config("baseline", 0.1, 6, **common)
    baseline["hyperparameters"]["fail"] = {"type": "categorical", "vals": ["never", "nope"]}
    baseline["searcher"]["name"] = "grid"
    _run(baseline, isolated_run, project)
    flaky = _config("flaky", 0.1, 6, max_restarts=1, **common)
    flaky["hyperparameters"]["fail"] = {"type": "categorical", "vals": ["once", "always"]}
    flaky["searcher"]["name"] = "grid"
    path = isolated_run / "flaky.yaml"
    path.write_text(yaml.safe_dump(flaky))
    result = run_cli("experiment", str(path), str(project), cwd=isolated_run)
    assert result.returncode == 1, output(result)  # one trial ended ERROR
    assert result.stderr.count("restart 1 of 1 from its latest checkpoint") == 2, output(result)
    assert re.search(r"^\d\s+ERROR\s+fail=always", result.stdout, re.M), output(result)
    row = re.search(r"^(\d)\s+COMPLETED\s+fail=once.*\s6\s", result.stdout, re.M)
    assert row, output(result)

    def final(config: Dict[str, Any], number: int) -> Dict[str, torch.Tensor]:
        trial_dir = experiment_dir(checkpoint_dir, config) / f"trial-{number}"
        steps = {
            json.loads((p / "metadata.json").read_text())["steps_completed"]: p
            for p in trial_dir.iterdir()
            if p.is_dir()  # beside the checkpoints: error.log, the failed runs' tracebacks
        }
        state = torch.load(steps[6] / "state_dict.pth", weights_only=True)
        return state["models_state_dict"][0]

    number = int(row.group(1))
    resumed, uninterrupted = final(flaky, number), final(baseline, number)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


CLUSTER_SCRIPT = """
import determined as det
from determined import pytorch

import model_def

info = det.get_cluster_info()  # Determined's recipe: the trial's hparams and checkpoint
with pytorch.init(hparams=info.trial.hparams) as context:
    trainer = pytorch.Trainer(model_def.RegressionTrial(context), context)
    trainer.fit(latest_checkpoint=info.latest_checkpoint)
"""


def test_a_cluster_script_runs_under_single_with_its_trials_hparams(
    isolated_run: pathlib.Path,
) -> None:
    """``det.get_cluster_info().trial.hparams`` under ``single`` (None before: AttributeError),
    and the summary shows the trial's batches and best metric."""
    project = isolated_run / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    (project / "cluster.py").write_text(CLUSTER_SCRIPT)
    config = _config("cluster", 0.1, 4, entrypoint="python3 cluster.py")
    out = _run(config, isolated_run, project)
    # One trial: its hyperparameters under the table, its batches and best metric in the row.
    assert re.search(r"^1\s+COMPLETED\s+-\s+4\s+[\d.e+-]+\s+\S+$", out, re.M), out
    assert re.search(r"^hyperparameters: .*learning_rate=0.1$", out, re.M), out


ADVICE_SCRIPT = """
import os
print("LATEST=" + os.environ.get("DET_LIGHTNING_LATEST_CHECKPOINT", "-"))
print("ADVICE=" + os.environ["DET_LIGHTNING_RESUME_ADVICE"])
"""


def test_run_resume_means_latest_and_is_the_advice_after_a_signal(
    isolated_run: pathlib.Path,
) -> None:
    """``run --resume`` is ``DET_LIGHTNING_LATEST_CHECKPOINT=latest``; the message after a
    signal names the exact command that continues: this one with ``--resume``."""
    script = isolated_run / "show.py"
    script.write_text(ADVICE_SCRIPT)
    plain = run_cli("run", "show.py", "--epochs", "2", cwd=isolated_run)
    assert plain.returncode == 0, output(plain)
    assert "LATEST=-" in plain.stdout
    advice = "ADVICE=To continue, run: det-lightning run --resume show.py --epochs 2"
    assert advice in plain.stdout, output(plain)
    resumed = run_cli("run", "--resume", "show.py", "--epochs", "2", cwd=isolated_run)
    assert "LATEST=latest" in resumed.stdout and advice in resumed.stdout, output(resumed)
