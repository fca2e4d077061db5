"""Mixed precision (Determined's AMP switches on Lightning's precision) and the profilers."""

import pathlib
import time
from typing import Any, Dict, List

import pytest
import torch
from lightning.pytorch.plugins.precision import DoublePrecision
from lightning.pytorch.profilers import SimpleProfiler

from det_lightning import pytorch
from det_lightning.adapters.precision import TrialPrecision, apply_precision
from det_lightning.adapters.profiler import SystemMetricsMonitor
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.recording import RecordingLogger
from tests.fixtures.trials import make_trials
from tests.integration.test_onevar import closed_form_weight

OneVarTrial = make_trials(pytorch)["OneVarTrial"]


class AutocastProbe(OneVarTrial):  # type: ignore[valid-type, misc]
    """Records, per batch, whether autocast is on and in which dtype the model computed."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.seen: List[Dict[str, Any]] = []
        self.weights: List[float] = []
        self.model.register_forward_hook(self._record_dtype)
        self._inner_dtype: Any = None

    def _record_dtype(self, module: Any, args: Any, output: torch.Tensor) -> None:
        self._inner_dtype = output.dtype

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        out = self.model(batch[0])
        self.seen.append(
            {
                "autocast": torch.is_autocast_enabled("cpu"),
                "dtype": torch.get_autocast_dtype("cpu"),
                "computed_in": self._inner_dtype,
                "output": out.dtype,
            }
        )
        loss = super().train_batch(batch, epoch_idx, batch_idx)
        self.weights.append(self.model.weight.item())
        return loss


def _fit(
    trial_class: type, init_kwargs: Dict[str, Any], amp: bool = False, **fit_kwargs: Any
) -> Any:
    with pytorch.init(hparams={"lr": 0.5}, **init_kwargs) as context:
        if amp:
            context.experimental.use_amp()
        trial = trial_class(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(**{"max_length": pytorch.Batch(4), **fit_kwargs})
    return trial, trainer._lightning_trainer


def sgd_weight(lr: float, batches: Any, batch_size: int) -> float:
    """OneVarTrial's weight after SGD steps on just ``batches`` (indices), starting at 0."""
    xs = [i / 16 for i in range(1, 17)]
    w = 0.0
    for b in batches:
        batch = xs[b * batch_size : (b + 1) * batch_size]
        w -= lr * sum(2 * (w * x - 2 * x) * x for x in batch) / len(batch)
    return w


# ----- precision ----------------------------------------------------------------------------
def test_use_amp_on_cpu_is_bf16_autocast_without_a_scaler() -> None:
    trial, lightning_trainer = _fit(AutocastProbe, {"accelerator": "cpu"}, amp=True)

    plugin = lightning_trainer.precision_plugin
    assert isinstance(plugin, TrialPrecision) and plugin.precision == "bf16-mixed"
    assert trial.context.engine.scaler is None
    assert all(s["autocast"] and s["dtype"] == torch.bfloat16 for s in trial.seen)
    # use_amp()'s autocast_forward_pass hands float32 back to the loss, as in Determined.
    assert all(s["output"] == torch.float32 for s in trial.seen)
    weight = trial.model.weight.item()
    assert weight == pytest.approx(closed_form_weight(0.5, 4, 4), rel=2e-2)
    assert weight != 0.0


def test_init_precision_bf16_mixed_autocasts_every_step() -> None:
    trial, lightning_trainer = _fit(AutocastProbe, {"precision": "bf16-mixed"})
    assert lightning_trainer.precision_plugin.precision == "bf16-mixed"
    assert trial.context.engine.scaler is None
    assert [s["computed_in"] for s in trial.seen] == [torch.bfloat16] * 4


def test_init_precision_16_mixed_scales_losses_and_checkpoints_the_scaler(
    checkpoint_dir: pathlib.Path,
) -> None:
    trial, lightning_trainer = _fit(AutocastProbe, {"precision": "16-mixed"})

    scaler = trial.context.engine.scaler
    assert isinstance(scaler, torch.amp.GradScaler)
    assert lightning_trainer.precision_plugin.scaler is scaler
    assert [s["computed_in"] for s in trial.seen] == [torch.float16] * 4
    # The default scale (2**16) overflows float16 gradients of the later batches: the scaler
    # skips those steps, halving itself each time. The steps it takes are plain SGD on
    # unscaled gradients, up to float16 rounding.
    weights = [0.0] + trial.weights
    stepped = [b for b in range(4) if weights[b + 1] != weights[b]]
    assert 0 < len(stepped) < 4
    assert scaler.get_scale() == 2.0**16 / 2 ** (4 - len(stepped))
    expected = sgd_weight(0.5, stepped, batch_size=4)
    assert trial.model.weight.item() == pytest.approx(expected, rel=2e-2)
    (saved,) = [p for p in checkpoint_dir.iterdir() if p.is_dir()]
    state = ckpt.read_state_dict(saved, weights_only=False)
    assert state[ckpt.SCALER]["scale"] == scaler.get_scale()


class FakeScaler:
    """Records the order in which the context uses a scaler (Determined's manual recipe)."""

    def __init__(self, calls: List[str]) -> None:
        self.calls = calls

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        self.calls.append("scale")
        return loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("unscale_")

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("step")
        optimizer.step()

    def update(self) -> None:
        self.calls.append("update")

    def state_dict(self) -> Dict[str, Any]:
        return {"calls": len(self.calls)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass


def test_step_optimizer_unscales_before_clipping() -> None:
    calls: List[str] = []

    class ManualAmp(OneVarTrial):  # type: ignore[valid-type, misc]
        def __init__(self, context: Any) -> None:
            self.scaler = context.wrap_scaler(FakeScaler(calls))
            super().__init__(context)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.mean((self.model(x) - y) ** 2)
            self.context.backward(self.scaler.scale(loss))
            self.context.step_optimizer(
                self.opt, clip_grads=lambda params: calls.append("clip_grads"), scaler=self.scaler
            )
            self.scaler.update()
            return loss

    trial, _ = _fit(ManualAmp, {})
    assert calls == ["scale", "unscale_", "clip_grads", "step", "update"] * 4
    assert trial.model.weight.item() == pytest.approx(closed_form_weight(0.5, 4, 4), rel=1e-6)


def test_clip_grads_sees_unscaled_gradients_with_16_mixed() -> None:
    seen: List[float] = []

    class Clipped(OneVarTrial):  # type: ignore[valid-type, misc]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.mean((self.model(x) - y) ** 2)
            self.context.backward(loss)
            self.context.step_optimizer(
                self.opt, clip_grads=lambda params: seen.append(float(params[0].grad))
            )
            return loss

    _fit(Clipped, {"precision": "16-mixed"}, max_length=pytorch.Batch(1))
    # The first batch's true gradient at w = 0: mean(2 (0 - 2x) x) for x = 1/16 .. 4/16.
    xs = [i / 16 for i in range(1, 5)]
    true_grad = sum(-4 * x * x for x in xs) / 4
    assert seen == [pytest.approx(true_grad, rel=1e-2)]


def test_lr_scheduler_waits_when_the_scaler_skips_the_step() -> None:
    class InfAtBatchOne(OneVarTrial):  # type: ignore[valid-type, misc]
        def __init__(self, context: Any) -> None:
            self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=4.0))
            super().__init__(context)
            self.per_batch = context.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5),
                step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH,
            )
            self.weights: List[float] = []

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.mean((self.model(x) - y) ** 2)
            poison = float("inf") if batch_idx == 1 else 1.0  # inf gradients on batch 1 only
            self.context.backward(self.scaler.scale(loss * poison))
            self.context.step_optimizer(self.opt, scaler=self.scaler)
            self.scaler.update()
            self.weights.append(self.model.weight.item())
            return loss

    trial, _ = _fit(InfAtBatchOne, {})
    # Batch 1 changed nothing: neither the weight nor the learning rate.
    assert trial.weights[1] == trial.weights[0]
    assert trial.weights[2] != trial.weights[1]
    assert trial.per_batch.last_epoch == 3  # stepped after batches 0, 2 and 3
    assert trial.opt.param_groups[0]["lr"] == pytest.approx(0.5 * 0.5**3)
    assert trial.scaler.get_scale() == 2.0  # halved once, for the skipped step


def test_configure_apex_amp_names_the_native_replacement() -> None:
    with pytorch.init(hparams={}) as context:
        with pytest.raises(NotImplementedError, match=r"use_amp\(\).*GradScaler.*16-mixed"):
            context.configure_apex_amp(models=[], optimizers=[])


def test_a_mixed_precision_plugin_passed_in_uses_its_scaler_in_determineds_order() -> None:
    from lightning.pytorch.plugins.precision import MixedPrecision

    seen: List[float] = []

    class Clipped(OneVarTrial):  # type: ignore[valid-type, misc]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.mean((self.model(x) - y) ** 2)
            self.context.backward(loss)
            self.context.step_optimizer(
                self.opt, clip_grads=lambda params: seen.append(float(params[0].grad))
            )
            return loss

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    with pytorch.init(hparams={"lr": 0.5}) as context:
        trial = Clipped(context)
        trainer = pytorch.Trainer(
            trial, context, plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)]
        )
        trainer.fit(max_length=pytorch.Batch(1))
    assert trial.context.engine.scaler is scaler
    assert isinstance(trainer._lightning_trainer.precision_plugin, TrialPrecision)
    true_grad = sum(-4 * (i / 16) ** 2 for i in range(1, 5)) / 4
    assert seen == [pytest.approx(true_grad, rel=1e-2)]
    assert trial.model.weight.item() == pytest.approx(-0.5 * true_grad, rel=1e-2)


def test_precision_choice_rules() -> None:
    with pytorch.init(hparams={}) as context:
        plain = {"plugins": [], "precision": None}
        assert apply_precision(context, plain) == plain
        mine = DoublePrecision()
        assert apply_precision(context, {"plugins": [mine], "precision": "16"})["plugins"] == [mine]
        legacy = apply_precision(context, {"plugins": [], "precision": 16})
        assert "precision" not in legacy
        assert legacy["plugins"][0].precision == "16-mixed"
        assert apply_precision(context, {"precision": "64-true"}) == {"precision": "64-true"}


def test_precision_examples() -> None:
    import doctest

    from det_lightning.adapters import precision

    result = doctest.testmod(precision)
    assert result.attempted > 0 and result.failed == 0


def test_bf16_with_a_use_amp_scaler_is_refused() -> None:
    with pytorch.init(hparams={}) as context:
        context.wrap_scaler(torch.amp.GradScaler("cpu"))
        context.engine.auto_amp = True  # what use_amp() does on a GPU
        with pytest.raises(ValueError, match="bf16-mixed.*does not scale"):
            apply_precision(context, {"precision": "bf16-mixed"})


# ----- profilers ----------------------------------------------------------------------------
def test_set_profiler_writes_traces_to_the_tensorboard_directory(tmp_path: pathlib.Path) -> None:
    tensorboard = tmp_path / "tb"

    class Profiled(OneVarTrial):  # type: ignore[valid-type, misc]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.set_profiler(
                activities=[torch.profiler.ProfilerActivity.CPU],
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
            )

    with pytorch.init(hparams={"lr": 0.5}) as context:
        trial = Profiled(context)
        pytorch.Trainer(trial, context, tensorboard_dir=str(tensorboard), logger=False).fit(
            max_length=pytorch.Batch(6)
        )
    traces = list(tensorboard.glob("*.pt.trace.json"))
    assert len(traces) == 1
    assert "train_batch" in traces[0].read_text() or "aten::" in traces[0].read_text()
    assert isinstance(context.profiler, torch.profiler.profile)
    assert trial.model.weight.item() == pytest.approx(closed_form_weight(0.5, 6, 4), rel=1e-6)


def test_set_profiler_refuses_its_own_trace_handler() -> None:
    class Profiled(OneVarTrial):  # type: ignore[valid-type, misc]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.set_profiler(on_trace_ready=print)

    with pytest.raises(ValueError, match="Drop on_trace_ready"):
        _fit(Profiled, {})


def test_profiling_enabled_logs_system_metrics_and_timings() -> None:
    recording = RecordingLogger()
    with pytorch.init(hparams={"lr": 0.5}) as context:
        trial = OneVarTrial(context)
        pytorch.Trainer(trial, context, logger=recording).fit(
            max_length=pytorch.Batch(4), profiling_enabled=True
        )
    ((step, cpu),) = recording.values("system/cpu/cpu_util_simple")
    assert step == 4 and 0.0 <= cpu <= 100.0 * torch.get_num_threads() * 64
    assert recording.values("system/memory/memory_free")[0][1] > 0
    assert recording.values("timing/train_batch")[0][1] > 0


def test_configure_profiler_times_only_its_batch_window(caplog: pytest.LogCaptureFixture) -> None:
    class SlowBatches(OneVarTrial):  # type: ignore[valid-type, misc]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if batch_idx in (2, 3):
                time.sleep(0.2)
            return super().train_batch(batch, epoch_idx, batch_idx)

    recording = RecordingLogger()
    with pytorch.init(hparams={"lr": 0.5}) as context:
        trainer = pytorch.Trainer(SlowBatches(context), context, logger=recording)
        trainer.configure_profiler(enabled=True, begin_on_batch=2, end_after_batch=3)
        trainer.fit(max_length=pytorch.Batch(8))
    ((_, mean_time),) = recording.values("timing/train_batch")
    assert mean_time >= 0.2  # only the two slow batches were timed
    assert "fit(..., profiling_enabled=True)" in caplog.text


def test_system_metrics_monitor_rejects_a_tiny_interval() -> None:
    with pytest.raises(ValueError, match="at least 0.1 seconds"):
        SystemMetricsMonitor(sampling_interval=0.01)


def test_lightning_profiler_passes_through(tmp_path: pathlib.Path) -> None:
    profiler = SimpleProfiler(dirpath=tmp_path, filename="perf")
    with pytorch.init(hparams={"lr": 0.5}) as context:
        trial = OneVarTrial(context)
        pytorch.Trainer(trial, context, profiler=profiler, logger=False).fit(
            max_length=pytorch.Batch(4)
        )
    report = (tmp_path / "fit-perf.txt").read_text()
    assert "run_training_batch" in report


# ----- under a plain lightning.Trainer (LightningTrial) -------------------------------------
# Under a plain lightning.Trainer these warnings are Lightning's to show the user, not ours.
leafspec_noise = pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
few_workers_noise = pytest.mark.filterwarnings("ignore:.*does not have many workers.*")


def _plain_fit(trial_class: type, max_steps: int, **trainer_kwargs: Any) -> Any:
    import lightning as L

    from det_lightning.adapters import LightningTrial

    module = LightningTrial(trial_class, hparams={"lr": 0.5})
    settings: Dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        max_steps=max_steps,
        limit_val_batches=0,
    )
    settings.update(trainer_kwargs)
    trainer = L.Trainer(**settings)
    trainer.fit(module)
    return module, trainer


@leafspec_noise
@few_workers_noise
def test_plain_trainer_bf16_mixed_autocasts_the_trial() -> None:
    module, trainer = _plain_fit(AutocastProbe, 3, precision="bf16-mixed")
    assert isinstance(trainer.precision_plugin, TrialPrecision)
    assert [s["computed_in"] for s in module.trial.seen] == [torch.bfloat16] * 3
    assert module.context.engine.scaler is None


@leafspec_noise
@few_workers_noise
def test_plain_trainer_16_mixed_scaler_is_unscaled_before_clip_grads() -> None:
    from lightning.pytorch.plugins.precision import MixedPrecision

    seen: List[float] = []

    class Clipped(OneVarTrial):  # type: ignore[valid-type, misc]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.mean((self.model(x) - y) ** 2)
            self.context.backward(loss)
            self.context.step_optimizer(
                self.opt, clip_grads=lambda params: seen.append(float(params[0].grad))
            )
            return loss

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    module, trainer = _plain_fit(
        Clipped, 1, plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)]
    )
    assert module.context.engine.scaler is scaler
    assert isinstance(trainer.precision_plugin, TrialPrecision)
    true_grad = sum(-4 * (i / 16) ** 2 for i in range(1, 5)) / 4
    assert seen == [pytest.approx(true_grad, rel=1e-2)]
    assert module.trial.model.weight.item() == pytest.approx(-0.5 * true_grad, rel=1e-2)


@leafspec_noise
@few_workers_noise
def test_plain_trainer_set_profiler_traces_go_to_the_loggers_directory(
    tmp_path: pathlib.Path,
) -> None:
    from lightning.pytorch.loggers import TensorBoardLogger

    class Profiled(OneVarTrial):  # type: ignore[valid-type, misc]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.set_profiler(
                activities=[torch.profiler.ProfilerActivity.CPU],
                schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1),
            )

    tensorboard = TensorBoardLogger(save_dir=str(tmp_path), name="run", version="v")
    module, _ = _plain_fit(Profiled, 3, logger=tensorboard)
    assert module.context.get_tensorboard_path() == pathlib.Path(tensorboard.log_dir)
    assert len(list(pathlib.Path(tensorboard.log_dir).glob("*.pt.trace.json"))) == 1
