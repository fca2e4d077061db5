"""``det_lightning.transformers.DetCallback`` (``determined.transformers``) with a real Hugging
Face ``Trainer`` (``tests/fixtures/hf_trainer.py``): the searcher's length checked against the
Trainer's, a run outside any experiment, one output folder per live run, and a trial stopped
by SIGTERM that resumes like a straight run, from its own checkpoint."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest
import yaml

import det_lightning as det
from det_lightning._env import TRIAL_INFO_ENV
from det_lightning._info import ClusterInfo, TrialInfo
from tests.fixtures import hf_trainer, warm

FIXTURE = pathlib.Path(hf_trainer.__file__)


def _as_trial(monkeypatch: pytest.MonkeyPatch, searcher: Dict[str, Any]) -> None:
    config = {"searcher": {"name": "single", "metric": "eval_loss", **searcher}}
    info = ClusterInfo(TrialInfo(3, 1, {"lr": 0.05}, config))
    monkeypatch.setenv(TRIAL_INFO_ENV, info.to_environment())


def _callback(tmp_path: pathlib.Path, **overrides: Any) -> Any:
    from det_lightning.transformers import DetCallback

    args = hf_trainer.training_args(str(tmp_path / "out"), 0.05, **overrides)
    return DetCallback(det.core.init(checkpoint_storage=str(tmp_path / "store")), args)


@pytest.mark.parametrize(
    "searcher, overrides",
    [
        ({"max_length": {"batches": 12}}, {}),
        ({"name": "adaptive_asha", "time_metric": "batches", "max_time": 12}, {}),
        ({"time_metric": "epochs", "max_time": 2}, {"max_steps": -1, "num_train_epochs": 2}),
    ],
)
def test_a_searcher_length_that_is_the_trainers_is_accepted(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, searcher: Any, overrides: Any
) -> None:
    """adaptive_asha's max_time too, which Determined 0.38.1's callback met with
    AttributeError (``self.required_metrics`` was never set)."""
    _as_trial(monkeypatch, searcher)
    callback = _callback(tmp_path, **overrides)
    assert callback.searcher_metric == "eval_loss"
    assert callback.time_metric == searcher.get("time_metric")


@pytest.mark.parametrize(
    "searcher, says",
    [
        ({"max_length": {"batches": 10}}, "batches=12 != batches=10"),
        ({"max_length": 12}, "searcher.max_length is deprecated"),
        ({"name": "adaptive_asha", "time_metric": "batches", "max_time": 20}, "max_time"),
        ({"time_metric": "epochs", "max_time": 3}, "batches=12 != epochs=3"),
    ],
)
def test_a_searcher_length_that_is_not_the_trainers_is_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, searcher: Any, says: str
) -> None:
    _as_trial(monkeypatch, searcher)
    with pytest.raises(ValueError, match=re.escape(says)):
        _callback(tmp_path)


def test_the_searchers_metrics_must_be_reported(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as_trial(monkeypatch, {"time_metric": "tokens", "max_time": 1000})
    callback = _callback(tmp_path)
    assert callback.required_metrics == ["tokens"]
    with pytest.raises(ValueError, match="Time metric 'tokens'"):
        callback._check_eval_metrics({"eval_loss": 1.0})
    callback._check_eval_metrics({"eval_loss": 1.0, "tokens": 5})
    with pytest.raises(ValueError, match="both missing"):
        callback._check_eval_metrics({"eval_accuracy": 1.0})


def test_outside_an_experiment_it_reports_to_the_local_core_api(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Determined's raised "must be run on a Determined cluster"; here ``python train.py``
    trains and checkpoints into core.init()'s storage."""
    monkeypatch.delenv(TRIAL_INFO_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with det.core.init(checkpoint_storage=str(tmp_path / "store")) as ctx:
        hf_trainer.train(det, ctx, "hf-out")
        stored = sorted(e.metadata["steps_completed"] for e in ctx.checkpoint.store.published())
    assert stored == [4, 8, 12]
    assert (tmp_path / "hf-out" / "metadata.json").exists()


def test_what_the_trainer_and_the_user_pass_is_left_as_it_was(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Determined's callback appended the searcher's metrics to the ``filter_metrics`` list
    given, and popped ``epoch`` from the ``logs`` the Trainer passes on to the callbacks after
    it (adding ``batches`` and ``epochs``); ours reports the same and changes neither."""
    import transformers

    from det_lightning.transformers import DetCallback

    _as_trial(monkeypatch, {"max_length": {"batches": 12}})
    wanted = ["loss"]
    args = hf_trainer.training_args(str(tmp_path / "out"), 0.05)
    with det.core.init(checkpoint_storage=str(tmp_path / "store")) as ctx:
        callback = DetCallback(ctx, args, filter_metrics=wanted)
        assert wanted == ["loss"]
        assert callback.filter_metrics == ["loss", "eval_loss"]
        reported: List[Dict[str, Any]] = []
        monkeypatch.setattr(
            ctx.train, "report_metrics", lambda **kw: reported.append(kw), raising=True
        )
        state = transformers.TrainerState(global_step=4, epoch=1.0)
        logs = {"loss": 0.5, "grad_norm": 1.5, "learning_rate": 0.05, "epoch": 1.0}
        given = dict(logs)
        callback.on_log(args, state, transformers.TrainerControl(), logs=logs)
    assert logs == given
    assert reported == [
        {
            "group": "training",
            "steps_completed": 4,
            "metrics": {"loss": 0.5, "batches": 4, "epochs": 1.0},
        }
    ]
    callback.on_train_end(args, state, transformers.TrainerControl())


def test_one_output_dir_serves_one_live_run(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs saving into one folder would upload each other's files: the second is
    refused, naming the fix; the folder is free again once the first ends training."""
    _as_trial(monkeypatch, {"max_length": {"batches": 12}})
    first = _callback(tmp_path)
    with pytest.raises(RuntimeError, match=r"in use by trial 3, process \d+.*trial-\{info"):
        _callback(tmp_path)
    first.on_train_end(None, None, None)
    _callback(tmp_path)


def test_the_transformers_package_is_named_when_missing() -> None:
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "import det_lightning.compat; det_lightning.compat.install()\n"
        "from determined.transformers import DetCallback\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "pip install 'det-lightning[transformers]'" in done.stderr, done.stderr


# ----- a trial of det-lightning experiment ---------------------------------------------------
def _experiment(
    work: pathlib.Path, project: pathlib.Path, name: str, **env: str
) -> "subprocess.Popen[str]":
    config = work / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "entrypoint": "python3 hf_trainer.py",
                "hyperparameters": {"lr": 0.05},
                "searcher": {
                    "name": "single",
                    "metric": "eval_loss",
                    "max_length": {"batches": 12},
                },
                "max_restarts": 0,
            }
        )
    )
    return warm.Popen(
        [sys.executable, "-m", "det_lightning", "experiment", str(config), str(project)],
        cwd=work,
        env=dict(os.environ, OMP_NUM_THREADS="1", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finished(process: "subprocess.Popen[str]") -> str:
    out, err = process.communicate(timeout=300)
    return f"exit status {process.returncode}\nstdout:\n{out}\nstderr:\n{err}"


def _checkpoints(checkpoint_dir: pathlib.Path, name: str) -> Dict[int, pathlib.Path]:
    """The trial's checkpoints by steps_completed."""
    found = {}
    for experiment in checkpoint_dir.iterdir():
        record = experiment / "experiment.json"
        if record.exists() and json.loads(record.read_text())["name"] == name:
            for meta in (experiment / "trial-1").glob("*/metadata.json"):
                found[json.loads(meta.read_text())["steps_completed"]] = meta.parent
    return found


def _events(path: pathlib.Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_trial_stopped_by_sigterm_resumes_like_a_straight_run(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """SIGTERM while the trial waits after step 8: the Trainer stops at its next log (step
    10), saves, uploads, and the search exits 75; the same command resumes the trial from
    that checkpoint (downloaded into output_dir), and its final weights are a straight run's.
    Both experiments share the project folder, and another run's checkpoint-11 is left in
    output_dir when the trial resumes: it resumes from its own checkpoint-10."""
    project = isolated_run / "project"
    project.mkdir()
    shutil.copy(FIXTURE, project / "hf_trainer.py")
    events = isolated_run / "events.jsonl"

    straight = _experiment(isolated_run, project, "hf-straight")
    shown = _finished(straight)
    assert straight.returncode == 0, shown
    done = _checkpoints(checkpoint_dir, "hf-straight")
    assert sorted(done) == [4, 8, 12], shown
    assert json.loads((done[12] / "metadata.json").read_text()) == {
        "steps_completed": 12,
        "trial_id": 1,
    }

    first = _experiment(isolated_run, project, "hf-resumed", EVENTS=str(events), HOLD_AT="8")
    deadline = time.monotonic() + 240
    while not (isolated_run / "held-8").exists():
        assert first.poll() is None and time.monotonic() < deadline, _finished(first)
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGTERM)
    shown = _finished(first)
    assert first.returncode == 75, shown
    assert sorted(_checkpoints(checkpoint_dir, "hf-resumed")) == [4, 8, 10], shown

    # Another run's leftover with more steps (other weights): Determined's callback resumed
    # from the highest checkpoint-* in output_dir, which on a fresh container was its own.
    decoy = project / "hf-out" / "checkpoint-11"
    shutil.copytree(project / "hf-out" / "checkpoint-4", decoy)
    shutil.copy(done[12] / "checkpoint-12" / "model.safetensors", decoy / "model.safetensors")

    second = _experiment(isolated_run, project, "hf-resumed", EVENTS=str(events))
    shown = _finished(second)
    assert second.returncode == 0, shown
    resumed = _checkpoints(checkpoint_dir, "hf-resumed")
    assert sorted(resumed) == [4, 8, 10, 12], shown
    starts = [e["started_at"] for e in _events(events) if "started_at" in e]
    assert starts[0] is None and starts[1] is not None and starts[1].endswith(resumed[10].name)
    for name in ("model.safetensors", "optimizer.pt"):
        ours = (resumed[12] / "checkpoint-12" / name).read_bytes()
        assert ours == (done[12] / "checkpoint-12" / name).read_bytes(), name
