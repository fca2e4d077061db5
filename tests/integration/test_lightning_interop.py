"""Lightning interop, both ways.

- ``LightningTrial``: a ``PyTorchTrial`` class trained by a plain ``lightning.Trainer``, whose own
  settings decide validation, checkpoints and length; ``validate``/``test``/``predict`` work.
- ``det_lightning.pytorch.Trainer``: Lightning callbacks and loggers run beside the trial
  (``ModelCheckpoint(monitor="validation_loss")``, ``EarlyStopping``, ``LearningRateMonitor``),
  and every way of stopping early leaves a final checkpoint.
"""

import inspect
import io
import pathlib
import sys
from typing import Any, Dict, List, Optional

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
)

from det_lightning import pytorch
from det_lightning.adapters import LightningTrial
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.recording import RecordingLogger
from tests.fixtures.run import run_trial
from tests.fixtures.trials import make_trials
from tests.integration.test_onevar import closed_form_weight

pytestmark = [
    # Under a plain lightning.Trainer these are Lightning's to show the user, not ours.
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers.*"),
]

TRIALS = make_trials(pytorch)


class Events(pytorch.PyTorchCallback):
    """Records hook names (and a few arguments) plus a counter kept in checkpoints."""

    def __init__(self) -> None:
        self.events: List[Any] = []
        self.loaded: Optional[Dict[str, Any]] = None

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self.events.append(("on_trial_startup", first_batch_idx, checkpoint_uuid))

    def on_training_start(self) -> None:
        self.events.append("on_training_start")

    def on_training_workload_end(self, avg_metrics: Dict, batch_metrics: List) -> None:
        self.events.append(("on_training_workload_end", len(batch_metrics)))

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self.events.append("on_validation_end")

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        self.events.append("on_checkpoint_save_start")

    def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
        self.events.append("on_checkpoint_load_start")

    def on_trial_shutdown(self) -> None:
        self.events.append("on_trial_shutdown")

    def state_dict(self) -> Dict[str, Any]:
        return {"validations": self.events.count("on_validation_end")}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.loaded = dict(state_dict)


class OneVarWithEvents(TRIALS["OneVarTrial"]):  # type: ignore[valid-type, misc]
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.hooks = Events()

    def build_callbacks(self) -> Dict[str, Any]:
        return {"events": self.hooks}


def plain_trainer(**kwargs: Any) -> L.Trainer:
    """A CPU ``lightning.Trainer`` without the console extras; ``kwargs`` override."""
    settings: Dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        default_root_dir=str(pathlib.Path.cwd()),
    )
    settings.update(kwargs)
    return L.Trainer(**settings)


def validation_loss(weight: float) -> float:
    """OneVarTrial's validation loss: mean((w x - 2x)^2) over x = 1..4."""
    return (weight - 2) ** 2 * sum(x * x for x in range(1, 5)) / 4


# ----- LightningTrial under a plain lightning.Trainer ---------------------------------------
def test_lightning_trial_trains_under_a_plain_trainer() -> None:
    module = LightningTrial(OneVarWithEvents, hparams={"lr": 0.5, "batch_size": 4})
    assert not hasattr(module, "trial")  # built in setup(), once the Trainer knows the device
    trainer = plain_trainer(max_steps=7, enable_checkpointing=False)
    trainer.fit(module)

    weight = module.trial.model.weight.item()
    assert weight == pytest.approx(closed_form_weight(0.5, 7, 4), rel=1e-6)
    assert module.context.device == trainer.strategy.root_device
    assert (module.context.distributed.rank, module.context.distributed.size) == (0, 1)
    events = module.trial.hooks.events
    assert events[0] == ("on_trial_startup", 0, None)
    assert events[1] == "on_training_start"
    assert events[-1] == "on_trial_shutdown"
    # Lightning's epoch-end validation after batch 4 (the sanity check is not reported).
    assert events.count("on_validation_end") == 1


def test_lightning_settings_decide_validation_checkpoints_and_reporting(
    tmp_path: pathlib.Path,
) -> None:
    best = ModelCheckpoint(monitor="validation_loss", dirpath=tmp_path / "ckpts", save_top_k=1)
    module = LightningTrial(TRIALS["MLPTrial"], hparams={"n": 64, "batch_size": 8})
    trainer = plain_trainer(
        max_steps=12,
        val_check_interval=4,
        log_every_n_steps=4,
        num_sanity_val_steps=0,
        callbacks=[best],
    )
    trainer.fit(module)

    recorder = module.trial.recorder
    # 8 batches an epoch: validations after batches 4 and 8, then 4 of the second epoch.
    validations = [v["validation_loss"] for v in recorder.validations]
    assert len(validations) == 3
    assert len(recorder.batch_losses) == 12  # reported every log_every_n_steps batches
    assert best.best_model_score is not None
    assert best.best_model_score.item() == pytest.approx(min(validations))
    saved = torch.load(best.best_model_path, weights_only=False)
    assert saved["det_lightning_trial"][ckpt.CALLBACKS] == {"recorder": {}}
    assert trainer.callback_metrics["validation_loss"].item() == pytest.approx(validations[-1])


def test_validate_test_and_predict_use_the_validation_loader() -> None:
    module = LightningTrial(TRIALS["OneVarTrial"], hparams={"lr": 0.5, "batch_size": 4})
    trainer = plain_trainer(max_steps=4, enable_checkpointing=False, num_sanity_val_steps=0)
    trainer.fit(module)
    weight = module.trial.model.weight.item()

    expected = validation_loss(weight)
    assert trainer.validate(module)[0]["validation_loss"] == pytest.approx(expected, rel=1e-5)
    assert trainer.test(module)[0]["validation_loss"] == pytest.approx(expected, rel=1e-5)
    predictions = trainer.predict(module)
    assert predictions is not None
    assert torch.cat(predictions).flatten().tolist() == pytest.approx(
        [weight * x for x in range(1, 5)], rel=1e-6
    )


def test_validate_without_fit_builds_the_trial() -> None:
    module = LightningTrial(TRIALS["OneVarTrial"], hparams={})
    results = plain_trainer().validate(module)
    assert results == [{"validation_loss": pytest.approx(validation_loss(0.0))}]


def test_in_a_search_trial_lightning_trial_takes_the_trials_seed_config_and_hparams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A script trial of ``det-lightning experiment`` that drives its own Trainer: as
    ``init()`` there, the seed the search drew for the trial seeds it (not the config's
    experiment seed), and the trial's hyperparameters are used where none are given."""
    from det_lightning._env import TRIAL_INFO_ENV
    from det_lightning._info import ClusterInfo, TrialInfo

    config = {"reproducibility": {"experiment_seed": 1673293593}, "name": "x"}
    hparams = {"lr": 0.5, "batch_size": 4}
    info = ClusterInfo(TrialInfo(1, 0, hparams, config, trial_seed=556896495))
    monkeypatch.setenv(TRIAL_INFO_ENV, info.to_environment())
    for given in ({}, {"hparams": dict(hparams), "exp_conf": {"name": "y"}}):
        torch.manual_seed(999)
        module = LightningTrial(TRIALS["OneVarTrial"], **given)  # type: ignore[arg-type]
        plain_trainer().validate(module)
        assert module.context.get_trial_seed() == 556896495 == torch.initial_seed()
        assert module.context.get_hparams() == hparams
        assert module.context.get_experiment_config() == config
    monkeypatch.delenv(TRIAL_INFO_ENV)
    module = LightningTrial(TRIALS["OneVarTrial"], hparams={}, exp_conf=config)
    plain_trainer().validate(module)  # outside a search: the config's seed, as before
    assert module.context.get_trial_seed() == 1673293593 == torch.initial_seed()


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")  # no new checkpoints
def test_resume_from_a_lightning_checkpoint_continues_exactly() -> None:
    first = LightningTrial(OneVarWithEvents, hparams={"lr": 0.5, "batch_size": 4})
    trainer = plain_trainer(max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(first)
    path = trainer.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    assert first.trial.hooks.events.count("on_checkpoint_save_start") == 1

    second = LightningTrial(OneVarWithEvents, hparams={"lr": 0.5, "batch_size": 4})
    resumed = plain_trainer(max_epochs=2, num_sanity_val_steps=0, enable_checkpointing=False)
    # The checkpoint loads with weights_only=True (Lightning < 2.6 has no such argument).
    safe = (
        {"weights_only": True}
        if "weights_only" in inspect.signature(resumed.fit).parameters
        else {}
    )
    resumed.fit(second, ckpt_path=path, **safe)

    assert second.progress.batches_trained == 8
    weight = second.trial.model.weight.item()
    assert weight == pytest.approx(closed_form_weight(0.5, 8, 4), rel=1e-6)
    hooks = second.trial.hooks
    assert hooks.events[:3] == [
        ("on_trial_startup", 4, path),
        "on_checkpoint_load_start",
        "on_training_start",
    ]
    assert hooks.loaded == {"validations": 1}


def test_full_dataset_evaluation_sees_the_whole_loader_once() -> None:
    calls: List[int] = []

    class FullDataset(TRIALS["OneVarTrial"]):  # type: ignore[valid-type, misc]
        evaluate_batch = pytorch.PyTorchTrial.evaluate_batch

        def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
            records = sum(len(x) for x, _ in data_loader)
            calls.append(records)
            return {"records": float(records)}

    results = plain_trainer().validate(LightningTrial(FullDataset, hparams={}))
    assert calls == [4]
    assert results == [{"records": 4.0}]


def test_set_stop_requested_stops_a_plain_trainer_after_that_batch() -> None:
    class Stopping(OneVarWithEvents):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if batch_idx == 2:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    module = LightningTrial(Stopping, hparams={"lr": 0.5, "batch_size": 4})
    plain_trainer(max_steps=10, enable_checkpointing=False, num_sanity_val_steps=0).fit(module)
    assert module.progress.batches_trained == 3
    weight = module.trial.model.weight.item()
    assert weight == pytest.approx(closed_form_weight(0.5, 3, 4), rel=1e-6)
    assert module.trial.hooks.events[-1] == "on_trial_shutdown"


def test_trial_shutdown_hook_runs_when_a_plain_fit_fails() -> None:
    class Failing(OneVarWithEvents):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if batch_idx == 1:
                raise RuntimeError("bad batch")
            return super().train_batch(batch, epoch_idx, batch_idx)

    module = LightningTrial(Failing, hparams={"lr": 0.5})
    with pytest.raises(RuntimeError, match="bad batch"):
        plain_trainer(max_steps=4, enable_checkpointing=False, num_sanity_val_steps=0).fit(module)
    assert module.trial.hooks.events == [
        ("on_trial_startup", 0, None),
        "on_training_start",
        ("on_training_workload_end", 1),  # log_every_n_steps=1
        "on_trial_shutdown",
    ]


def test_lightning_trial_rejects_an_instance() -> None:
    with pytest.raises(TypeError, match="PyTorchTrial subclass"):
        LightningTrial(object, hparams={})  # type: ignore[arg-type]


# ----- Lightning callbacks and loggers under det_lightning.pytorch.Trainer -------------------
def _trained_batches(checkpoint_dir: pathlib.Path) -> List[int]:
    found = []
    for path in sorted(checkpoint_dir.iterdir()):
        state = ckpt.read_trial_state(path)
        if state is not None:
            found.append(state["batches_trained"])
    return sorted(found)


def test_model_checkpoint_monitors_validation_loss(tmp_path: pathlib.Path) -> None:
    best = ModelCheckpoint(monitor="validation_loss", dirpath=tmp_path / "best", save_top_k=1)
    trial, _ = run_trial(
        pytorch,
        "MLPTrial",
        {"n": 64, "batch_size": 8},
        trainer_kwargs={"callbacks": [best]},
        max_length=pytorch.Batch(12),
        validation_period=pytorch.Batch(3),
    )
    validations = [v["validation_loss"] for v in trial.recorder.validations]
    assert len(validations) == 4
    assert best.best_model_score is not None
    assert best.best_model_score.item() == pytest.approx(min(validations))
    assert pathlib.Path(best.best_model_path).is_file()


def test_early_stopping_stops_with_a_final_checkpoint(checkpoint_dir: pathlib.Path) -> None:
    # The first validation (after batch 3) already meets the threshold.
    stop = EarlyStopping(monitor="validation_loss", stopping_threshold=1e9)
    trial, _ = run_trial(
        pytorch,
        "MLPTrial",
        {"n": 64, "batch_size": 8},
        trainer_kwargs={"callbacks": [stop]},
        max_length=pytorch.Batch(12),
        validation_period=pytorch.Batch(3),
        reporting_period=pytorch.Batch(1),
    )
    assert len(trial.recorder.batch_losses) == 3
    assert stop.stopped_epoch == 0
    assert _trained_batches(checkpoint_dir) == [3]


class StopAt(Callback):
    """A Lightning callback that asks the loop to stop after batch ``batch`` (1-based)."""

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if pl_module.progress.batches_trained == self.batch:
            trainer.should_stop = True


def test_lightning_callback_stopping_leaves_a_final_checkpoint(
    checkpoint_dir: pathlib.Path,
) -> None:
    trial, _ = run_trial(
        pytorch,
        "MLPTrial",
        {"n": 64, "batch_size": 8},
        trainer_kwargs={"callbacks": [StopAt(5)]},
        max_length=pytorch.Batch(12),
        reporting_period=pytorch.Batch(1),
    )
    assert len(trial.recorder.batch_losses) == 5
    assert _trained_batches(checkpoint_dir) == [5]


def test_set_stop_requested_stops_cleanly_with_a_final_checkpoint(
    checkpoint_dir: pathlib.Path,
) -> None:
    class Stopping(OneVarWithEvents):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if batch_idx == 4:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    with pytorch.init(hparams={"lr": 0.5}) as context:
        trial = Stopping(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(12))

    assert trial.model.weight.item() == pytest.approx(closed_form_weight(0.5, 5, 4), rel=1e-6)
    assert _trained_batches(checkpoint_dir) == [5]
    assert trial.hooks.events[-2:] == ["on_checkpoint_save_start", "on_trial_shutdown"]


def test_learning_rate_monitor_logs_the_scheduled_rate() -> None:
    class Scheduled(TRIALS["OneVarTrial"]):  # type: ignore[valid-type, misc]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5),
                step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH,
            )

    recording = RecordingLogger()
    with pytorch.init(hparams={"lr": 0.4}) as context:
        trial = Scheduled(context)
        trainer = pytorch.Trainer(
            trial,
            context,
            logger=recording,
            callbacks=[LearningRateMonitor(logging_interval="step")],
            log_every_n_steps=1,
        )
        trainer.fit(max_length=pytorch.Batch(4), validation_period=pytorch.Batch(4))

    rates = [value for _, value in recording.values("lr-SGD")]
    assert rates == pytest.approx([0.4 * 0.5**k for k in range(4)])
    assert [step for step, _ in recording.values("Determined/loss")] == [0, 1, 2, 3]
    assert len(recording.values("Determined/validation_loss")) == 1


# ----- the progress bar ---------------------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fit_onevar_with_terminal(monkeypatch: pytest.MonkeyPatch) -> L.Trainer:
    monkeypatch.setattr(sys, "stderr", _Terminal())
    _, trainer = run_trial(
        pytorch,
        "OneVarTrial",
        {"lr": 0.5},
        max_length=pytorch.Batch(6),
        reporting_period=pytorch.Batch(2),
    )
    return trainer._lightning_trainer


def test_progress_bar_shows_epoch_batches_and_loss_in_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    lightning_trainer = _fit_onevar_with_terminal(monkeypatch)
    assert lightning_trainer.progress_bar_callback is not None
    assert "loss" in lightning_trainer.progress_bar_metrics
    shown = capsys.readouterr().out
    assert "Epoch 1" in shown and "loss=" in shown and "/4" in shown


def test_progress_bar_is_off_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert _fit_onevar_with_terminal(monkeypatch).progress_bar_callback is None


# ----- several devices ----------------------------------------------------------------------
def ddp_weight(lr: float, steps: int, per_rank_batch: int, ranks: int) -> float:
    """OneVarTrial's weight when Lightning shards its 16 records with ``DistributedSampler``
    (which always shuffles training data, seed 0 + epoch): each step averages the ranks'
    gradients, i.e. takes the gradient of the union of their batches."""
    xs = [i / 16 for i in range(1, 17)]
    per_rank = len(xs) // ranks
    batches_per_epoch = per_rank // per_rank_batch
    w = 0.0
    for step in range(steps):
        epoch, k = divmod(step, batches_per_epoch)
        order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(epoch)).tolist()
        union = [
            xs[i]
            for r in range(ranks)
            for i in order[r::ranks][k * per_rank_batch : (k + 1) * per_rank_batch]
        ]
        w -= lr * sum(2 * (w * x - 2 * x) * x for x in union) / len(union)
    return w


@pytest.mark.slow
@pytest.mark.distributed
def test_lightning_trial_on_two_ddp_processes(tmp_path: pathlib.Path) -> None:
    """Each rank's trial is built with its own rank, and Lightning's distributed sampler shards
    the data: two ranks with 4 records a batch train as one process with those 8."""
    import json

    from tests.distributed import jobs

    script = pathlib.Path(__file__).parent / "scripts" / "lightning_trial_ddp.py"
    job = jobs.run([str(script), "out"], tmp_path / "job", timeout=300)
    assert job.returncode == 0, job.output[-6000:]
    records = [json.loads((tmp_path / "job" / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]

    expected_weight = ddp_weight(lr=0.5, steps=3, per_rank_batch=4, ranks=2)
    for rank, record in enumerate(records):
        assert (record["rank"], record["size"], record["device"]) == (rank, 2, "cpu")
        assert record["batches_trained"] == 3
        assert record["weight"] == pytest.approx(expected_weight, rel=1e-6)
        (metrics,) = record["validation"]
        expected_loss = validation_loss(expected_weight)
        assert metrics["validation_loss"] == pytest.approx(expected_loss, rel=1e-5)


@pytest.mark.slow
@pytest.mark.distributed
def test_a_stop_asked_by_one_lightning_rank_stops_both_at_the_same_batch(
    tmp_path: pathlib.Path,
) -> None:
    """Rank 1 alone asks to stop at its third batch: both ranks stop together at the next
    agreement point (FIRST_AGREEMENT batches), in step, with no per-batch collective."""
    import json

    from det_lightning.adapters.preemption import FIRST_AGREEMENT
    from tests.distributed import jobs

    script = pathlib.Path(__file__).parent / "scripts" / "lightning_trial_ddp.py"
    job = jobs.run([str(script), "out", "stop"], tmp_path / "job", timeout=300)
    assert job.returncode == 0, job.output[-6000:]
    records = [json.loads((tmp_path / "job" / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["batches_trained"] for r in records] == [FIRST_AGREEMENT] * 2
    assert records[0]["weight"] == records[1]["weight"]


def test_progress_bar_default_rule() -> None:
    import doctest

    from det_lightning.adapters import trainer_args

    terminal = _Terminal()
    assert trainer_args.progress_bar_default(terminal, {})
    assert trainer_args.progress_bar_default(terminal, {"CI": "false"})
    assert not trainer_args.progress_bar_default(terminal, {"CI": "1"})
    assert not trainer_args.progress_bar_default(io.StringIO(), {})
    result = doctest.testmod(trainer_args)
    assert result.attempted > 0 and result.failed == 0


def test_metrics_since_the_last_period_are_reported_when_a_callback_stops_training(
    checkpoint_dir: pathlib.Path,
) -> None:
    trial, _ = run_trial(
        pytorch,
        "MLPTrial",
        {"n": 64, "batch_size": 8},
        trainer_kwargs={"callbacks": [StopAt(5)]},
        max_length=pytorch.Batch(12),
        reporting_period=pytorch.Batch(100),
    )
    assert len(trial.recorder.batch_losses) == 5  # no period ended, yet all five are reported
    assert _trained_batches(checkpoint_dir) == [5]


@pytest.mark.parametrize(
    "stop_in, expected",
    [(None, (12, False)), ("training", (5, True)), ("validation", (4, True))],
)
def test_fit_result_says_whether_a_stop_request_ended_training(
    checkpoint_dir: pathlib.Path, stop_in: Optional[str], expected: "tuple[int, bool]"
) -> None:
    """``FitResult.stopped_early``: False when ``max_length`` was reached; True when a stop
    request ended training first, also one made while validating (agreed after the pass)."""

    class Stopping(OneVarWithEvents):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if stop_in == "training" and batch_idx == 4:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
            if stop_in == "validation":
                self.context.set_stop_requested(True)
            return super().evaluate_batch(batch, batch_idx)

    with pytorch.init(hparams={"lr": 0.5}) as context:
        trainer = pytorch.Trainer(Stopping(context), context)
        trainer.fit(max_length=pytorch.Batch(12), validation_period=pytorch.Batch(4))
    assert trainer.result is not None
    assert (trainer.result.batches_trained, trainer.result.stopped_early) == expected
    assert _trained_batches(checkpoint_dir)[-1] == expected[0]
