"""Checkpoints during ``fit()``: layout, hooks, policies, exact resume, loading, bad input, and
export of Lightning ``.ckpt`` files."""

import hashlib
import json
import logging
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn

from det_lightning import errors, pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch import _checkpoint_write as ckpt_write
from det_lightning.pytorch import _export, _state_dicts
from det_lightning.pytorch import _local_store as local_store
from det_lightning.pytorch._local_store import LocalStore
from tests.fixtures.run import run_trial
from tests.fixtures.trials import make_trials, seed_everything

TRIALS = make_trials(pytorch)
MLPTrial: Any = TRIALS["MLPTrial"]
OneVarTrial: Any = TRIALS["OneVarTrial"]
HPARAMS = {"lr": 0.01}  # the fixture's lr 0.05 diverges within 4 epochs
REPO = pathlib.Path(__file__).resolve().parents[2]


def by_steps(root: pathlib.Path) -> Dict[int, pathlib.Path]:
    """The complete checkpoints under ``root`` by ``steps_completed``."""
    found = {}
    for path in root.iterdir():
        if not path.name.startswith("."):
            found[json.loads((path / "metadata.json").read_text())["steps_completed"]] = path
    return found


def snapshot(root: pathlib.Path) -> Dict[str, Tuple[int, str]]:
    """Every file under ``root`` with its mtime and content hash, and every directory."""
    return {
        str(p.relative_to(root)): (
            (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            if p.is_file()
            else (0, "dir")
        )
        for p in sorted(root.rglob("*"))
    }


def assert_untouched(root: pathlib.Path, before: Dict[str, Tuple[int, str]]) -> None:
    """Nothing in ``before`` changed or went away; at most the (empty) checkpoint directory
    appeared, which ``fit()`` creates and probes before reading the checkpoint."""
    after = snapshot(root)
    assert {k: after.get(k) for k in before} == before
    assert set(after) - set(before) <= {"checkpoints"}
    assert not any((root / "checkpoints").glob("*")) or "checkpoints" in before


def assert_same(mine: Any, theirs: Any, where: str = "") -> None:
    """Nested dicts/lists/tuples of tensors and plain values, equal bit for bit."""
    if isinstance(mine, torch.Tensor):
        assert torch.equal(mine, theirs), where
    elif isinstance(mine, dict):
        assert mine.keys() == theirs.keys(), where
        for key in mine:
            assert_same(mine[key], theirs[key], f"{where}/{key}")
    elif isinstance(mine, (list, tuple)):
        assert len(mine) == len(theirs), where
        for idx, (a, b) in enumerate(zip(mine, theirs)):
            assert_same(a, b, f"{where}/{idx}")
    else:
        assert mine == theirs, where


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Dict[int, pathlib.Path]:
    """Checkpoints at batches 4, 8 and 12 of MLPTrial (never modified by the tests)."""
    root = tmp_path_factory.mktemp("trained") / "checkpoints"
    run_trial(
        pytorch,
        "MLPTrial",
        HPARAMS,
        trainer_kwargs={"checkpoint_dir": str(root), "logger": False},
        max_length=pytorch.Batch(12),
        checkpoint_period=pytorch.Batch(4),
        checkpoint_policy="none",
    )
    return by_steps(root)


def copy_of(path: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(path, tmp_path / "copies" / path.name))


# ----- layout ---------------------------------------------------------------------------------
def test_checkpoint_directory_has_determined_layout(trained: Dict[int, pathlib.Path]) -> None:
    assert sorted(trained) == [4, 8, 12]
    path = trained[8]
    assert sorted(p.name for p in path.iterdir()) == [
        "code",
        "load_data.json",
        "metadata.json",
        "state_dict.pth",
        "trial_state.pkl",
    ]
    state = torch.load(path / "state_dict.pth", weights_only=True)
    assert set(state) == {
        "models_state_dict",
        "optimizers_state_dict",
        "lr_schedulers_state_dict",
        "callbacks",
        "rng_state",
        "det_lightning",
    }
    assert set(state["rng_state"]) == {"cpu_rng_state", "np_rng_state", "random_rng_state"}
    assert list(state["models_state_dict"][0]) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    assert state["optimizers_state_dict"][0]["state"][0]["momentum_buffer"].shape == (16, 8)
    load_data = json.loads((path / "load_data.json").read_text())
    assert load_data == {
        "trial_type": "PyTorchTrial",
        "experiment_config": None,
        "hparams": HPARAMS,
        "trial_cls_spec": f"tests.fixtures.trials:{MLPTrial.__qualname__}",
        "is_trainer": True,
    }
    metadata = json.loads((path / "metadata.json").read_text())
    assert metadata["steps_completed"] == 8 and metadata["format"] == "pickle"
    assert metadata["framework"].startswith("torch-")
    trial_state = pickle.loads((path / "trial_state.pkl").read_bytes())
    assert trial_state == {
        "trial_id": 0,
        "last_ckpt": 8,
        "step_id": 0,
        "last_val": 0,
        "batches_trained": 8,
        "epochs_trained": 1,
    }
    assert (path / "code" / "tests" / "fixtures" / "trials.py").is_file()


class ScalerTrial(OneVarTrial):
    """OneVarTrial stepping through a GradScaler, Determined's manual AMP recipe."""

    def __init__(self, context: Any) -> None:
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=4.0))
        super().__init__(context)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.mean((self.model(x) - y) ** 2)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.opt, scaler=self.scaler)
        self.scaler.update()
        return loss


def fit(
    trial_cls: Any,
    hparams: Optional[Dict[str, Any]] = None,
    seed: int = 3,
    exp_conf: Optional[Dict[str, Any]] = None,
    trainer_kwargs: Optional[Dict] = None,
    **fit_kwargs: Any,
) -> Any:
    seed_everything(seed)
    with pytorch.init(hparams=dict(hparams or {}), exp_conf=exp_conf) as context:
        trial = trial_cls(context)
        pytorch.Trainer(trial, context, **(trainer_kwargs or {})).fit(**fit_kwargs)
    return trial


def test_scaler_state_is_saved_and_restored(checkpoint_dir: pathlib.Path) -> None:
    trial = fit(ScalerTrial, max_length=pytorch.Batch(3), checkpoint_policy="none")
    [path] = by_steps(checkpoint_dir).values()
    saved = torch.load(path / "state_dict.pth", weights_only=True)["scaler_state_dict"]
    assert saved == trial.scaler.state_dict() and saved["scale"] == 4.0
    resumed = fit(ScalerTrial, max_length=pytorch.Batch(3), latest_checkpoint=str(path))
    assert resumed.scaler.state_dict() == saved  # restored (no batch left to train)
    assert torch.equal(resumed.model.weight, trial.model.weight)


class CompiledTrial(OneVarTrial):
    def __init__(self, context: Any) -> None:
        self.context = context
        self.model = context.wrap_model(torch.compile(nn.Linear(1, 1, bias=False), backend="eager"))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))


def test_compiled_model_is_saved_with_plain_keys(checkpoint_dir: pathlib.Path) -> None:
    compiled = fit(CompiledTrial, max_length=pytorch.Batch(2), checkpoint_policy="none")
    [path] = by_steps(checkpoint_dir).values()
    state = torch.load(path / "state_dict.pth", weights_only=True)
    assert list(state["models_state_dict"][0]) == ["weight"]
    plain: Any = pytorch.load_trial_from_checkpoint_path(str(path), trial_class=OneVarTrial)
    assert torch.equal(plain.model.weight, compiled.model._orig_mod.weight)


@pytest.mark.gpu
def test_gpu_rng_state_is_saved_on_a_gpu(checkpoint_dir: pathlib.Path) -> None:
    run_trial(
        pytorch,
        "MLPTrial",
        HPARAMS,
        init_kwargs={"accelerator": "gpu"},
        max_length=pytorch.Batch(2),
        checkpoint_policy="none",
    )
    [path] = by_steps(checkpoint_dir).values()
    rng_state = ckpt.read_state_dict(path)["rng_state"]
    assert set(rng_state) == {"cpu_rng_state", "np_rng_state", "random_rng_state", "gpu_rng_state"}
    assert rng_state["gpu_rng_state"].dtype == torch.uint8


def test_ddp_model_saves_plain_keys(tmp_path: pathlib.Path) -> None:
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
        ddp = nn.parallel.DistributedDataParallel(model)
        assert list(ddp.state_dict())[0].startswith("module.")
        assert _state_dicts.model_state_dicts([ddp])[0].keys() == model.state_dict().keys()
    finally:  # (a group left open would be the next test's, in this process)
        torch.distributed.destroy_process_group()


def test_code_never_contains_the_checkpoint_directory(
    isolated_run: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial module in the working directory, checkpoints in ``./checkpoints``: ``code/``
    copies the directory but not the checkpoints (nor the TensorBoard files) inside it."""
    (isolated_run / "cwd_trial.py").write_text(FILE_TRIAL)
    monkeypatch.syspath_prepend(str(isolated_run))
    monkeypatch.delitem(sys.modules, "cwd_trial", raising=False)
    import cwd_trial  # type: ignore[import-not-found]

    root = isolated_run / "checkpoints"
    fit(
        cwd_trial.FileTrial,
        trainer_kwargs={"checkpoint_dir": str(root), "tensorboard_dir": str(isolated_run / "tb")},
        max_length=pytorch.Batch(2),
        checkpoint_period=pytorch.Batch(1),
        checkpoint_policy="none",
    )
    monkeypatch.delitem(sys.modules, "cwd_trial")
    second = by_steps(root)[2]
    assert sorted(p.name for p in (second / "code").iterdir()) == ["cwd_trial.py"]


# ----- hooks and logs -------------------------------------------------------------------------
class HookRecorder(pytorch.PyTorchCallback):
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.events: List[Tuple[str, Any]] = []

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        self.events.append(("save_start", sorted(checkpoint)))

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self.events.append(("end", checkpoint_dir))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        # The final directory, complete already, as Determined's shared_fs storage passes it.
        self.events.append(
            ("write_end", (checkpoint_dir, ckpt.is_complete(pathlib.Path(checkpoint_dir))))
        )

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.events.append(("upload_end", ckpt.is_complete(self.root / uuid) and uuid))


class SaveSpy(Callback):
    def __init__(self) -> None:
        self.saved: List[int] = []

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Dict) -> None:
        self.saved.append(checkpoint["global_step"])  # one optimizer step per batch


def test_saves_go_through_lightning_and_callbacks_run_in_determined_order(
    checkpoint_dir: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder, spy = HookRecorder(checkpoint_dir), SaveSpy()

    class Trial(MLPTrial):
        def build_callbacks(self) -> Dict[str, Any]:
            return {"hooks": recorder}

    with pytest.warns(FutureWarning, match="on_checkpoint_end"), caplog.at_level(logging.INFO):
        fit(
            Trial,
            HPARAMS,
            trainer_kwargs={"callbacks": [spy]},
            max_length=pytorch.Batch(6),
            checkpoint_period=pytorch.Batch(3),
            checkpoint_policy="none",
        )
    uuids = sorted(by_steps(checkpoint_dir).items())
    assert spy.saved == [3, 6]  # a Lightning callback saw both saves
    expected: List[Tuple[str, Any]] = []
    for _, path in uuids:
        expected += [
            ("save_start", sorted(ckpt.read_state_dict(path))),
            ("end", str(path)),
            ("write_end", (str(path), True)),
            ("upload_end", path.name),
        ]
    assert recorder.events == expected
    # A callback that keeps the path to copy or upload the checkpoint later finds it there.
    kept = [event[1][0] for event in recorder.events if event[0] == "write_end"]
    assert all(ckpt.is_complete(pathlib.Path(p)) for p in kept)
    for _, path in uuids:  # the log names each checkpoint's path
        assert f"saved checkpoint {path.name} at {path}" in caplog.text


def test_a_failed_write_leaves_no_checkpoint_and_keeps_earlier_ones(
    checkpoint_dir: pathlib.Path,
) -> None:
    class FailSecond(pytorch.PyTorchCallback):
        writes = 0

        def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
            FailSecond.writes += 1  # inside the write, as a full disk would fail it
            if FailSecond.writes == 2:
                raise OSError("disk full")

    class Trial(MLPTrial):
        def build_callbacks(self) -> Dict[str, Any]:
            return {"fail": FailSecond()}

    with pytest.raises(OSError, match="disk full"):
        fit(
            Trial,
            HPARAMS,
            max_length=pytorch.Batch(6),
            checkpoint_period=pytorch.Batch(3),
            checkpoint_policy="none",
        )
    assert [p.name.startswith(".") for p in checkpoint_dir.iterdir()] == [False]
    assert list(by_steps(checkpoint_dir)) == [3]


def test_a_killed_writer_leaves_only_a_hidden_partial(tmp_path: pathlib.Path) -> None:
    """SIGKILL in the middle of a write: nothing appears under the UUID's name, and
    ``latest_checkpoint`` keeps pointing at the last complete one."""
    root = tmp_path / "checkpoints"
    local_store.write_atomically(
        root,
        "done",
        lambda d: ckpt_write.write_files(
            d, {}, {**ckpt.new_trial_state(), "batches_trained": 3}, {}, code=[], code_skip=[]
        ),
    )
    script = textwrap.dedent(f"""
        import os, pathlib, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from det_lightning.pytorch import _local_store as local_store
        def write(d):
            (d / "state_dict.pth").write_bytes(b"half")
            (d / "metadata.json").write_text('{{"steps_completed": 99}}')
            os.kill(os.getpid(), signal.SIGKILL)
        local_store.write_atomically(pathlib.Path({str(root)!r}), "killed", write)
    """)
    result = subprocess.run([sys.executable, "-c", script], env=dict(os.environ), timeout=120)
    assert result.returncode == -signal.SIGKILL
    assert sorted(p.name for p in root.iterdir()) == [".killed.partial", "done"]
    assert ckpt.latest_checkpoint(root) == root / "done"


# ----- policies -------------------------------------------------------------------------------
class ScriptedMetricTrial(OneVarTrial):
    """Reports ``score = hparams["scores"][k]`` at its k-th validation."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.scores = list(context.get_hparam("scores"))
        self.validations = 0

    def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
        return {
            **super().evaluate_batch(batch, batch_idx),
            "score": torch.tensor(self.scores[self.validations]),
        }

    def build_callbacks(self) -> Dict[str, Any]:
        trial = self

        class Count(pytorch.PyTorchCallback):
            def on_validation_end(self, metrics: Dict[str, Any]) -> None:
                trial.validations += 1

        return {"count": Count()}


SCORES = [1.0, 3.0, 2.0, 0.5, 2.5]  # validations at batches 2, 4, 6, 8, 10


@pytest.mark.parametrize(
    "policy,smaller_is_better,kept",
    [
        ("all", True, [2, 4, 6, 8, 10]),
        ("none", True, [10]),  # the final checkpoint is still written
        ("best", True, [8, 10]),  # the best (0.5 at 8) and the latest
        ("best", False, [4, 10]),  # the best (3.0 at 4) and the latest
    ],
)
def test_checkpoint_policy_keeps_the_right_checkpoints(
    checkpoint_dir: pathlib.Path, policy: str, smaller_is_better: bool, kept: List[int]
) -> None:
    exp_conf = {"searcher": {"metric": "score", "smaller_is_better": smaller_is_better}}
    fit(
        ScriptedMetricTrial,
        {"lr": 0.1, "scores": SCORES},
        exp_conf=exp_conf,
        max_length=pytorch.Batch(10),
        validation_period=pytorch.Batch(2),
        checkpoint_policy=policy,
    )
    assert sorted(by_steps(checkpoint_dir)) == kept


@pytest.mark.parametrize(
    "policy,storage,kept",
    [
        # the 2 best (0.5 at 8, 1.0 at 2) and the 2 newest (8, 10)
        ("all", {"save_trial_best": 2, "save_trial_latest": 2}, [2, 8, 10]),
        ("all", {"save_trial_best": 0, "save_trial_latest": 3}, [6, 8, 10]),
        ("all", {"save_trial_best": 0, "save_trial_latest": 0}, [10]),  # the newest stays: resume
        ("best", {"save_trial_best": 2}, [2, 8, 10]),  # 'best' wrote 2, 8 and the final 10
        ("all", {"type": "shared_fs", "host_path": "/x"}, [2, 4, 6, 8, 10]),  # no counts: keep all
        ("all", {"save_experiment_best": 2}, [2, 8, 10]),  # a trial's share of the best is kept
    ],
)
def test_checkpoint_storage_retention_is_honoured(
    checkpoint_dir: pathlib.Path, policy: str, storage: Dict[str, Any], kept: List[int]
) -> None:
    exp_conf = {
        "searcher": {"metric": "score", "smaller_is_better": True},
        "checkpoint_storage": storage,
    }
    fit(
        ScriptedMetricTrial,
        {"lr": 0.1, "scores": SCORES},
        exp_conf=exp_conf,
        max_length=pytorch.Batch(10),
        validation_period=pytorch.Batch(2),
        checkpoint_policy=policy,
    )
    assert sorted(by_steps(checkpoint_dir)) == kept


def test_save_experiment_best_spans_the_trials_of_an_experiment(tmp_path: pathlib.Path) -> None:
    """Each trial keeps its share of the experiment's 3 best while it runs; after the
    experiment each keeps its best and latest plus the experiment's 3 best (0.5, 0.6, 0.7)."""
    from det_lightning.pytorch._config_sections import CheckpointStorageConfig
    from det_lightning.pytorch._retention import retain_experiment_best

    exp_conf = {
        "searcher": {"metric": "score", "smaller_is_better": True},
        "checkpoint_storage": {
            "save_trial_best": 1,
            "save_trial_latest": 1,
            "save_experiment_best": 3,
        },
    }
    dirs = [tmp_path / "trial-1", tmp_path / "trial-2"]
    for directory, scores in zip(dirs, (SCORES, [0.7, 0.6, 4.0, 4.0, 4.0])):
        fit(
            ScriptedMetricTrial,
            {"lr": 0.1, "scores": scores},
            exp_conf=exp_conf,
            trainer_kwargs={"checkpoint_dir": str(directory)},
            max_length=pytorch.Batch(10),
            validation_period=pytorch.Batch(2),
            checkpoint_policy="all",
        )
    assert [sorted(by_steps(d)) for d in dirs] == [[2, 6, 8, 10], [2, 4, 6, 10]]
    before = {d.name: {v.name: k for k, v in by_steps(d).items()} for d in dirs}
    deleted = retain_experiment_best(
        [LocalStore(d) for d in dirs],
        CheckpointStorageConfig.from_exp_conf(exp_conf),
        metric="score",
        smaller_is_better=True,
    )
    assert [sorted(by_steps(d)) for d in dirs] == [[8, 10], [2, 4, 10]]
    assert sorted((p.parent.name, before[p.parent.name][p.name]) for p in deleted) == [
        ("trial-1", 2),
        ("trial-1", 6),
        ("trial-2", 6),
    ]


def test_a_trials_best_checkpoint_is_its_best_validations(tmp_path: pathlib.Path) -> None:
    """The checkpoint the summary names as a trial's best (a command trial's, read from its
    folder): the one whose validation gave the best searcher metric, not the newest (a
    new-user audit found the newest named after a resume); the newest when none recorded
    the metric."""
    from det_lightning.pytorch._retention import best_checkpoint

    exp_conf = {"searcher": {"metric": "score", "smaller_is_better": True}}
    directory = tmp_path / "trial-1"
    fit(
        ScriptedMetricTrial,
        {"lr": 0.1, "scores": SCORES},
        exp_conf=exp_conf,
        trainer_kwargs={"checkpoint_dir": str(directory)},
        max_length=pytorch.Batch(10),
        validation_period=pytorch.Batch(2),
        checkpoint_policy="all",
    )
    steps = {path.name: batches for batches, path in by_steps(directory).items()}
    store = LocalStore(directory)

    def best(metric: str, smaller: bool) -> int:
        found = best_checkpoint(store, metric, smaller)
        assert found is not None
        return steps[found.name]

    assert (best("score", True), best("score", False)) == (8, 4)  # 0.5 at 8, 3.0 at 4
    assert best("accuracy", True) == 10  # not recorded: the newest
    assert best_checkpoint(LocalStore(tmp_path / "none"), "score", True) is None


def test_a_bad_retention_count_is_a_clear_error(checkpoint_dir: pathlib.Path) -> None:
    exp_conf = {"checkpoint_storage": {"save_trial_best": -1}}
    with pytest.raises(errors.InvalidExperimentException, match="save_trial_best.*>= 0"):
        fit(OneVarTrial, exp_conf=exp_conf, max_length=pytorch.Batch(2))


def test_best_knows_the_earlier_runs_of_the_trial_after_a_resume(
    checkpoint_dir: pathlib.Path,
) -> None:
    """Run 1 validates 1.0, 3.0, 2.0 (batches 2, 4, 6); resumed, 1.5 and 2.5 (8, 10). 1.5 does
    not beat run 1's 1.0, so no checkpoint at 8; at the end the trial keeps its best (batch 2,
    written by run 1) and its latest (10), and run 1's checkpoint at 6 goes."""
    exp_conf = {"searcher": {"metric": "score", "smaller_is_better": True}}
    common: Dict[str, Any] = dict(
        exp_conf=exp_conf, validation_period=pytorch.Batch(2), checkpoint_policy="best"
    )
    written: List[int] = []

    class Resumable(ScriptedMetricTrial):
        """The same trial class and hyperparameters in both runs (a resume continues its own
        run only); the scores go on where the first run stopped."""

        def build_callbacks(self) -> Dict[str, Any]:
            trial = self

            class Saves(pytorch.PyTorchCallback):
                def on_trial_startup(self, first_batch_idx: int, latest: Optional[str]) -> None:
                    trial.validations = first_batch_idx // 2

                def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
                    written.append(trial.context.engine.steps_completed)

            return {**super().build_callbacks(), "saves": Saves()}

    hparams = {"lr": 0.1, "scores": [1.0, 3.0, 2.0, 1.5, 2.5]}
    fit(Resumable, hparams, max_length=pytorch.Batch(6), **common)
    assert sorted(by_steps(checkpoint_dir)) == [2, 6]
    metadata = json.loads((by_steps(checkpoint_dir)[2] / "metadata.json").read_text())
    validation = metadata["det_lightning_validation"]
    assert validation["metric"] == "score" and validation["value"] == 1.0
    assert validation["metrics"]["score"] == 1.0 and validation["metrics"]["batches"] == 2
    written.clear()

    seed_everything(3)
    with pytorch.init(hparams=hparams, exp_conf=exp_conf) as context:
        trainer = pytorch.Trainer(Resumable(context), context)
        trainer.fit(
            max_length=pytorch.Batch(10),
            latest_checkpoint="latest",
            **{k: v for k, v in common.items() if k != "exp_conf"},
        )
    found = by_steps(checkpoint_dir)
    assert sorted(found) == [2, 10]
    assert trainer.result is not None and trainer.result.best_checkpoint == found[2].name
    assert len(written) == 1  # only the final checkpoint: 1.5 at batch 8 was no improvement


def test_best_policy_fails_clearly_when_the_metric_is_never_reported(
    checkpoint_dir: pathlib.Path,
) -> None:
    exp_conf = {"searcher": {"metric": "accuracy", "smaller_is_better": False}}
    # As in Determined, the list is of what was reported, Determined's counters included.
    reported = r"\['batches', 'epochs', 'validation_loss'\]"
    with pytest.raises(RuntimeError, match=r"metric 'accuracy'.*" + reported):
        fit(
            OneVarTrial,
            exp_conf=exp_conf,
            max_length=pytorch.Batch(4),
            validation_period=pytorch.Batch(2),
            checkpoint_policy="best",
        )


# ----- resume ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stop_at", [5, 8, 13, 20])
def test_resume_matches_a_straight_run_bit_for_bit(
    stop_at: int, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLPTrial (shuffled loader, dropout, momentum, an epoch-stepped LR schedule), 8 batches an
    epoch: stopped after ``stop_at`` batches (20 is 2.5 epochs), resumed to 4 epochs under
    another seed, it trains the batches, losses and weights of a straight 4-epoch run.

    Both runs validate every ``stop_at`` batches: a validation draws from the global generator
    (its loader's iterator seed), and the interrupted run validates where it stops.
    """
    hparams = {**HPARAMS, "step_mode": "STEP_EVERY_EPOCH"}
    common: Dict[str, Any] = dict(
        validation_period=pytorch.Batch(stop_at),
        checkpoint_period=pytorch.Batch(4),
        checkpoint_policy="none",
    )
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", str(tmp_path / "straight"))
    straight, _ = run_trial(pytorch, "MLPTrial", hparams, max_length=pytorch.Epoch(4), **common)
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", str(tmp_path / "split"))
    first, _ = run_trial(pytorch, "MLPTrial", hparams, max_length=pytorch.Batch(stop_at), **common)
    path = by_steps(tmp_path / "split")[stop_at]
    name = path.name if stop_at % 2 else str(path)  # a UUID under the checkpoint dir, or a path
    resumed, _ = run_trial(
        pytorch,
        "MLPTrial",
        hparams,
        seed=99,
        max_length=pytorch.Epoch(4),
        latest_checkpoint=name,
        **common,
    )

    assert len(first.seen) == stop_at and len(resumed.seen) == 32 - stop_at
    assert first.seen + resumed.seen == straight.seen
    assert first.lrs + resumed.lrs == straight.lrs
    assert first.recorder.batch_losses + resumed.recorder.batch_losses == (
        straight.recorder.batch_losses
    )
    assert first.recorder.validations + resumed.recorder.validations == (
        straight.recorder.validations
    )
    assert_same(resumed.model.state_dict(), straight.model.state_dict())
    assert_same(resumed.opt.state_dict(), straight.opt.state_dict())


def test_initial_batch_is_the_resumed_batch(trained: Dict[int, pathlib.Path]) -> None:
    seen: List[Tuple[str, Any]] = []

    class Startup(pytorch.PyTorchCallback):
        def on_trial_startup(self, first_batch_idx: int, latest_checkpoint: Optional[str]) -> None:
            seen.append(("startup", first_batch_idx))

    class Trial(MLPTrial):
        def build_training_data_loader(self) -> Any:
            seen.append(("initial", self.context.get_initial_batch()))
            return super().build_training_data_loader()

        def build_callbacks(self) -> Dict[str, Any]:
            return {"startup": Startup()}

    # The same trial, instrumented: a resume continues the trial class that wrote it.
    Trial.__module__, Trial.__qualname__ = MLPTrial.__module__, MLPTrial.__qualname__
    trial = fit(Trial, HPARAMS, max_length=pytorch.Batch(10), latest_checkpoint=str(trained[8]))
    assert seen == [("startup", 8), ("initial", 8)]
    assert len(trial.seen) == 2


ANCIENT = REPO / "tests" / "fixtures" / "ancient"


class WarmStartProbe(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.events: List[Tuple[str, Any]] = []

    def on_trial_startup(self, first_batch_idx: int, latest_checkpoint: Optional[str]) -> None:
        self.events.append(("startup", first_batch_idx))

    def on_training_start(self) -> None:
        self.events.append(("start", self.trial.model.weight.item()))

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.events.append(("epoch", epoch_idx))


class WarmStarted(OneVarTrial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.batches = 0
        self.probe = WarmStartProbe()
        self.probe.trial = self  # type: ignore[attr-defined]

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.batches += 1
        return super().train_batch(batch, epoch_idx, batch_idx)

    def build_callbacks(self) -> Dict[str, Any]:
        return {"probe": self.probe}


def straight_from(weight: float, lr: float, batches: int) -> float:
    """OneVarTrial's weight after ``batches`` batches from ``weight`` (closed form, float64)."""
    xs = [i / 16 for i in range(1, 17)]
    w = weight
    for b in range(batches):
        chunk = xs[4 * (b % 4) : 4 * (b % 4) + 4]
        w -= lr * sum(2 * (w * x - 2 * x) * x for x in chunk) / len(chunk)
    return w


@pytest.mark.parametrize("version", ["0.17.7-pytorch", "0.20.0-pytorch", "0.21.0-pytorch"])
def test_a_cluster_trials_checkpoint_is_a_warm_start_from_batch_0(
    version: str, tmp_path: pathlib.Path
) -> None:
    """Determined's own old checkpoints (trial 17, 1 and 62, each after one batch): weights and
    optimizer restored (SGD lr 0.001 replaces the trial's 0.01), then all 6 batches trained."""
    path = copy_of(ANCIENT / version, tmp_path)
    saved = torch.load(path / "state_dict.pth", map_location="cpu", weights_only=False)
    weight = saved["models_state_dict"][0]["weight"].item()
    trial = fit(
        WarmStarted,
        {"lr": 0.01},
        max_length=pytorch.Batch(6),
        checkpoint_policy="none",
        latest_checkpoint=str(path),
    )
    assert trial.batches == 6
    assert trial.probe.events[:3] == [("startup", 0), ("start", weight), ("epoch", 0)]
    assert trial.opt.param_groups[0]["lr"] == 0.001
    assert trial.model.weight.item() == pytest.approx(straight_from(weight, 0.001, 6), rel=1e-5)


def test_our_checkpoint_of_another_trial_id_is_a_warm_start(
    trained: Dict[int, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """A checkpoint the experiment runner or a cluster wrote for trial 7, mid-epoch: its weights,
    then a full run from batch 0 in the straight order (its data position is not used)."""
    path = copy_of(trained[4], tmp_path)
    state = ckpt.read_trial_state(path)
    assert state is not None
    (path / ckpt.TRIAL_STATE_FILE).write_bytes(pickle.dumps({**state, "trial_id": 7}))
    seen: List[int] = []

    class Trial(MLPTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            seen.append(batch_idx)
            return super().train_batch(batch, epoch_idx, batch_idx)

    fit(
        Trial,
        HPARAMS,
        max_length=pytorch.Batch(5),
        checkpoint_policy="none",
        latest_checkpoint=str(path),
    )
    assert seen == [0, 1, 2, 3, 4]
    resumed = fit(
        MLPTrial,
        HPARAMS,
        max_length=pytorch.Batch(5),
        checkpoint_policy="none",
        latest_checkpoint=str(trained[4]),
    )
    assert len(resumed.seen) == 1  # the same checkpoint of this trial continues at batch 4


# ----- load_trial_from_checkpoint_path --------------------------------------------------------
FILE_TRIAL = textwrap.dedent("""
    import torch
    from torch import nn

    from det_lightning import pytorch


    class FileTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(nn.Linear(4, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def _data(self):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(16, 4, generator=g)
            return pytorch.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                      batch_size=4)

        build_training_data_loader = build_validation_data_loader = _data

        def train_batch(self, batch, epoch_idx, batch_idx):
            loss = nn.functional.mse_loss(self.model(batch[0]), batch[1])
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return loss

        def evaluate_batch(self, batch):
            return {"validation_loss": nn.functional.mse_loss(self.model(batch[0]), batch[1])}
""")


def test_loading_predicts_like_the_trained_trial(trained: Dict[int, pathlib.Path]) -> None:
    hparams_seen: List[Dict] = []

    class Trial(MLPTrial):
        def __init__(self, context: Any, tag: str) -> None:
            assert isinstance(context, pytorch.CheckpointLoadContext) and tag == "x"
            hparams_seen.append(context.get_hparams())
            super().__init__(context)

    loaded: Any = pytorch.load_trial_from_checkpoint_path(
        str(trained[12]), trial_class=Trial, trial_kwargs={"tag": "x"}
    )
    assert hparams_seen == [HPARAMS]
    state = torch.load(trained[12] / "state_dict.pth", weights_only=True)
    assert_same(loaded.model.state_dict(), state["models_state_dict"][0])


def test_importing_the_class_from_code_needs_consent(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_run / "ckpt_file_trial.py").write_text(FILE_TRIAL)
    monkeypatch.syspath_prepend(str(isolated_run))
    import ckpt_file_trial  # type: ignore[import-not-found]

    trained = fit(ckpt_file_trial.FileTrial, max_length=pytorch.Batch(3), checkpoint_policy="none")
    monkeypatch.delitem(sys.modules, "ckpt_file_trial")
    (isolated_run / "ckpt_file_trial.py").unlink()  # only the checkpoint's code/ has it now
    [path] = by_steps(checkpoint_dir).values()

    with pytest.raises(ValueError, match="trust_code=True"):
        pytorch.load_trial_from_checkpoint_path(str(path))
    loaded: Any = pytorch.load_trial_from_checkpoint_path(str(path), trust_code=True)
    source = pathlib.Path(type(loaded).__init__.__code__.co_filename)
    assert source == path / "code" / "ckpt_file_trial.py"
    assert torch.equal(loaded.model.weight, trained.model.weight)
    assert "ckpt_file_trial" not in sys.modules  # the import left no trace
    monkeypatch.setenv("DET_LIGHTNING_TRUST_CHECKPOINT_CODE", "1")
    assert type(pytorch.load_trial_from_checkpoint_path(str(path))).__name__ == "FileTrial"


def test_a_trial_defined_in_the_main_script_is_imported_from_code(tmp_path: pathlib.Path) -> None:
    """Determined's usual local script: the trial class lives in ``__main__``."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train_main.py").write_text(
        FILE_TRIAL
        + textwrap.dedent("""
        if __name__ == "__main__":
            import sys
            with pytorch.init() as context:
                trainer = pytorch.Trainer(FileTrial(context), context, checkpoint_dir=sys.argv[1],
                                          logger=False)
                trainer.fit(max_length=pytorch.Batch(2), checkpoint_policy="none")
    """)
    )
    root = tmp_path / "checkpoints"
    subprocess.run(
        [sys.executable, "train_main.py", str(root)],
        cwd=project,
        check=True,
        capture_output=True,
        timeout=300,
    )
    [path] = by_steps(root).values()
    load_data = json.loads((path / "load_data.json").read_text())
    assert load_data["trial_cls_spec"] == "train_main:FileTrial" and load_data["trial_in_main"]
    assert (path / "code" / "train_main.py").is_file()
    loaded: Any = pytorch.load_trial_from_checkpoint_path(str(path), trust_code=True)
    saved = ckpt.read_state_dict(path)["models_state_dict"][0]
    assert_same(loaded.model.state_dict(), saved)


def test_a_class_that_cannot_be_imported_is_a_clear_error(
    trained: Dict[int, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    with pytest.raises(ValueError, match="defined in a function. Pass trial_class"):
        pytorch.load_trial_from_checkpoint_path(str(trained[4]), trust_code=True)
    path = copy_of(trained[4], tmp_path)
    load_data = json.loads((path / "load_data.json").read_text())
    load_data.update(trial_cls_spec=":MyTrial", trial_in_main=True)
    (path / "load_data.json").write_text(json.dumps(load_data))
    with pytest.raises(ValueError, match="entrypoint script, which is not an importable module"):
        pytorch.load_trial_from_checkpoint_path(str(path), trust_code=True)
    load_data.update(trial_cls_spec="no_such_module:MyTrial")
    (path / "load_data.json").write_text(json.dumps(load_data))
    with pytest.raises(ValueError, match="Automatic import logic failed.*no_such_module"):
        pytorch.load_trial_from_checkpoint_path(str(path), trust_code=True)


# ----- bad input ------------------------------------------------------------------------------
def _missing_state_dict(path: pathlib.Path) -> None:
    (path / "state_dict.pth").unlink()


def _truncated_state_dict(path: pathlib.Path) -> None:
    data = (path / "state_dict.pth").read_bytes()
    (path / "state_dict.pth").write_bytes(data[: len(data) // 2])


DAMAGE = {
    "missing state_dict.pth": (_missing_state_dict, "has no state_dict.pth"),
    "truncated state_dict.pth": (_truncated_state_dict, "truncated or damaged"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_checkpoint_is_a_clear_error_and_nothing_is_touched(
    damage: str,
    trained: Dict[int, pathlib.Path],
    tmp_path: pathlib.Path,
    checkpoint_dir: pathlib.Path,
) -> None:
    spoil, message = DAMAGE[damage]
    path = copy_of(trained[8], tmp_path)
    spoil(path)
    shutil.copytree(trained[4], checkpoint_dir / trained[4].name)
    before = snapshot(tmp_path)
    with pytest.raises(errors.InvalidCheckpointException, match=message):
        fit(MLPTrial, HPARAMS, max_length=pytorch.Batch(12), latest_checkpoint=str(path))
    with pytest.raises(errors.InvalidCheckpointException, match=message):
        pytorch.load_trial_from_checkpoint_path(str(path), trial_class=MLPTrial)
    assert_untouched(tmp_path, before)


class WideMLPTrial(OneVarTrial):
    """A model with MLPTrial's layer names and 32 hidden units (it never gets to train)."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.model = context.wrap_model(
            nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
        )
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))


@pytest.mark.parametrize(
    "trial_cls,message",
    [
        (OneVarTrial, r"missing keys \['weight'\], unexpected keys \['0.bias'"),
        (WideMLPTrial, "size mismatch for 0.weight"),
    ],
)
def test_checkpoint_of_another_trial_shape_is_a_clear_error(
    trial_cls: Any,
    message: str,
    trained: Dict[int, pathlib.Path],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = copy_of(trained[8], tmp_path)
    before = snapshot(tmp_path)
    # Another trial class's checkpoint is refused as such, naming both classes and the way to
    # warm start from it; asked to warm start, its weights must still fit the model.
    refused = rf"another run: trial class .*MLPTrial, not .*{trial_cls.__name__}.*WARM_START=1"
    with pytest.raises(errors.InvalidCheckpointException, match=refused):
        fit(trial_cls, HPARAMS, max_length=pytorch.Batch(12), latest_checkpoint=str(path))
    monkeypatch.setenv("DET_LIGHTNING_ALLOW_WARM_START", "1")
    with pytest.raises(errors.InvalidCheckpointException, match=message):
        fit(trial_cls, HPARAMS, max_length=pytorch.Batch(12), latest_checkpoint=str(path))
    with pytest.raises(errors.InvalidCheckpointException, match=message):
        pytorch.load_trial_from_checkpoint_path(str(path), trial_class=trial_cls)
    assert_untouched(tmp_path, before)


def test_a_path_that_does_not_exist_is_a_clear_error(
    trained: Dict[int, pathlib.Path], tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    shutil.copytree(trained[4], checkpoint_dir / trained[4].name)
    before = snapshot(tmp_path)
    missing = str(tmp_path / "nowhere")
    with pytest.raises(errors.InvalidCheckpointException, match="no such checkpoint directory"):
        fit(MLPTrial, HPARAMS, max_length=pytorch.Batch(12), latest_checkpoint=missing)
    with pytest.raises(errors.InvalidCheckpointException, match="does not exist"):
        pytorch.load_trial_from_checkpoint_path(missing, trial_class=MLPTrial)
    assert_untouched(tmp_path, before)


# ----- Lightning .ckpt export -----------------------------------------------------------------
def _lightning_run(tmp_path: pathlib.Path) -> Tuple[Any, Dict[int, pathlib.Path]]:
    """A run with checkpoint_policy='all' and a ModelCheckpoint: a Determined checkpoint and
    a .ckpt file after each validation (batches 8, 16, 20)."""
    saver = ModelCheckpoint(
        dirpath=str(tmp_path / "lightning"), monitor="validation_loss", save_top_k=-1
    )
    trial = fit(
        MLPTrial,
        HPARAMS,
        trainer_kwargs={"callbacks": [saver]},
        max_length=pytorch.Batch(20),
        validation_period=pytorch.Batch(8),
        checkpoint_policy="all",
    )
    files = {}
    for file in (tmp_path / "lightning").iterdir():
        content = torch.load(file, weights_only=True)
        files[content[ckpt.LIGHTNING_TRIAL_STATE_KEY]["batches_trained"]] = file
    return trial, files


def test_lightning_ckpt_exports_to_the_determined_checkpoint_of_that_batch(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    _, files = _lightning_run(tmp_path)
    determined = by_steps(checkpoint_dir)
    assert sorted(files) == sorted(determined) == [8, 16, 20]
    exported = pytorch.export_lightning_checkpoint(files[16], tmp_path / "exported")
    assert exported.parent == tmp_path / "exported" and ckpt.is_complete(exported)
    assert_same(ckpt.read_state_dict(exported), ckpt.read_state_dict(determined[16]))
    for name in ("trial_state.pkl", "load_data.json"):
        assert (exported / name).read_bytes() == (determined[16] / name).read_bytes()
    assert json.loads((exported / "metadata.json").read_text())["steps_completed"] == 16
    callbacks = torch.load(exported / "lightning_state.pth", weights_only=True)["callbacks"]
    assert [key.split("{")[0] for key in callbacks] == ["ModelCheckpoint"]


def test_exported_checkpoint_resumes_exactly(
    tmp_path: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    straight, files = _lightning_run(tmp_path)
    exported = pytorch.export_lightning_checkpoint(files[8], tmp_path / "exported")
    resumed = fit(
        MLPTrial,
        HPARAMS,
        seed=99,
        max_length=pytorch.Batch(20),
        validation_period=pytorch.Batch(8),
        checkpoint_policy="all",
        latest_checkpoint=str(exported),
    )
    assert resumed.seen == straight.seen[8:]
    assert_same(resumed.model.state_dict(), straight.model.state_dict())


def test_determined_checkpoint_converts_to_lightning_and_back(
    trained: Dict[int, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    out = pytorch.to_lightning_checkpoint(trained[8], tmp_path / "out" / "b8.ckpt")
    content = torch.load(out, weights_only=True)
    state = ckpt.read_state_dict(trained[8])
    assert content["global_step"] == 8 and content["epoch"] == 1
    assert_same(
        content["state_dict"],
        {f"wrapped_models.0.{k}": v for k, v in state["models_state_dict"][0].items()},
    )
    back = pytorch.export_lightning_checkpoint(out, tmp_path / "back")
    assert_same(ckpt.read_state_dict(back), state)
    before = out.read_bytes()
    with pytest.raises(FileExistsError):
        pytorch.to_lightning_checkpoint(trained[4], out)
    assert out.read_bytes() == before and sorted(os.listdir(out.parent)) == ["b8.ckpt"]


def test_plain_lightning_keys_export_models_and_optimizers(
    trained: Dict[int, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """A .ckpt without the det_lightning keys (Lightning's own only) still gives the weights."""
    full = torch.load(
        pytorch.to_lightning_checkpoint(trained[12], tmp_path / "a.ckpt"), weights_only=True
    )
    plain = {k: v for k, v in full.items() if not k.startswith("det_lightning")}
    torch.save(plain, tmp_path / "plain.ckpt")
    exported = pytorch.export_lightning_checkpoint(tmp_path / "plain.ckpt", tmp_path / "out")
    loaded: Any = pytorch.load_trial_from_checkpoint_path(str(exported), trial_class=MLPTrial)
    state = ckpt.read_state_dict(trained[12])
    assert_same(loaded.model.state_dict(), state["models_state_dict"][0])
    assert_same(
        ckpt.read_state_dict(exported)["optimizers_state_dict"], state["optimizers_state_dict"]
    )
    assert (ckpt.read_trial_state(exported) or {}).get("batches_trained") == 12


def test_checkpoint_command_exports_and_converts(
    trained: Dict[int, pathlib.Path], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "cli.ckpt"
    assert _export.main(["convert", str(trained[4]), str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert _export.main(["export", str(out), "--checkpoint-dir", str(tmp_path / "dir")]) == 0
    exported = pathlib.Path(capsys.readouterr().out.strip())
    assert exported.parent == tmp_path / "dir"
    assert_same(ckpt.read_state_dict(exported), ckpt.read_state_dict(trained[4]))
    assert _export.main(["export", str(tmp_path / "none.ckpt")]) == 2  # a usage error
    assert "none.ckpt: no such file." in capsys.readouterr().err
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    assert _export.main(["export", str(tmp_path / "bad.ckpt")]) == 1
    assert "truncated or damaged" in capsys.readouterr().err
