"""On a CUDA device (marked ``gpu``: CI has none; run with ``pytest -m gpu tests/gpu``).

What only a GPU shows: batches and weights live on the device, the CUDA generator is saved and
restored so a resumed run continues bit-exactly, ``use_amp()`` is float16 autocast with a
``GradScaler`` (Determined's meaning on a GPU), Determined's explicit scaler recipe works, and
a checkpoint written on a GPU loads onto the CPU.
"""

import pathlib
from typing import Any, Dict, List

import pytest
import torch
from torch import nn

from det_lightning import pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.run import run_trial
from tests.fixtures.trials import make_trials, regression_data
from tests.gpu.copies import record_host_to_device_copies

pytestmark = pytest.mark.gpu

TRIALS = make_trials(pytorch)
HPARAMS = {"lr": 0.01, "dropout": 0.3, "shuffle": True}
SYNC = "called a synchronizing CUDA operation"  # torch's sync debug mode warning


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not torch.cuda.is_available():  # a gpu-marked test run without a GPU is a failure
        pytest.fail("tests/gpu needs a CUDA device; CI deselects them with -m 'not gpu'")


def checkpoints(root: pathlib.Path) -> Dict[int, pathlib.Path]:
    by_batch = {}
    for path in root.iterdir():
        if path.is_dir() and not path.name.startswith("."):
            by_batch[ckpt.read_metadata(path)["steps_completed"]] = path
    return by_batch


class DeviceProbe(TRIALS["MLPTrial"]):  # type: ignore[misc,valid-type,name-defined]
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.devices: List[str] = []
        self.weight_devices: List[str] = []

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.devices.append(batch[0].device.type)
        self.weight_devices.append(next(self.model.parameters()).device.type)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_batches_and_weights_live_on_the_gpu(checkpoint_dir: pathlib.Path) -> None:
    trials = {"DeviceProbe": DeviceProbe}
    with pytorch.init(hparams=HPARAMS, accelerator="gpu") as context:
        trial = trials["DeviceProbe"](context)
        pytorch.Trainer(trial, context, logger=False).fit(
            max_length=pytorch.Batch(6), checkpoint_policy="none"
        )
    assert trial.devices == ["cuda"] * 6
    assert trial.weight_devices == ["cuda"] * 6
    [path] = checkpoints(checkpoint_dir).values()
    rng = ckpt.read_state_dict(path)["rng_state"]
    assert rng["gpu_rng_state"].dtype == torch.uint8


def test_resume_on_the_gpu_is_bit_exact_mid_epoch(
    checkpoint_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Dropout draws from the CUDA generator: without its state in the checkpoint the resumed
    half would drop other units than the straight run does. Both runs validate where the first
    half stops (a validation pass draws from the global generator)."""
    straight, _ = run_trial(
        pytorch,
        "MLPTrial",
        HPARAMS,
        init_kwargs={"accelerator": "gpu"},
        trainer_kwargs={"checkpoint_dir": str(tmp_path / "straight"), "logger": False},
        max_length=pytorch.Batch(12),
        validation_period=pytorch.Batch(5),
        checkpoint_policy="none",
    )
    run_trial(
        pytorch,
        "MLPTrial",
        HPARAMS,
        init_kwargs={"accelerator": "gpu"},
        trainer_kwargs={"checkpoint_dir": str(checkpoint_dir), "logger": False},
        max_length=pytorch.Batch(5),
        validation_period=pytorch.Batch(5),
        checkpoint_policy="none",
    )
    resumed, _ = run_trial(
        pytorch,
        "MLPTrial",
        HPARAMS,
        seed=99,
        init_kwargs={"accelerator": "gpu"},
        trainer_kwargs={"checkpoint_dir": str(checkpoint_dir), "logger": False},
        max_length=pytorch.Batch(12),
        validation_period=pytorch.Batch(5),
        checkpoint_policy="none",
        latest_checkpoint="latest",
    )
    assert resumed.seen == straight.seen[5:]
    for a, b in zip(resumed.model.parameters(), straight.model.parameters()):
        assert torch.equal(a, b)


class AmpTrial(pytorch.PyTorchTrial):
    """``use_amp()``: Determined's one-line AMP."""

    def __init__(self, context: Any) -> None:
        self.context = context
        context.experimental.use_amp()
        self.model = context.wrap_model(
            nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        )
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.dtypes: List[torch.dtype] = []  # what the first layer computed in
        self.model[0].register_forward_hook(self._record)

    def _record(self, module: Any, args: Any, output: torch.Tensor) -> None:
        self.dtypes.append(output.dtype)

    def build_training_data_loader(self) -> Any:
        return pytorch.DataLoader(regression_data(64), batch_size=8)

    def build_validation_data_loader(self) -> Any:
        return pytorch.DataLoader(regression_data(16, seed=1), batch_size=8)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        out = self.model(x)
        # use_amp() casts the forward pass's output back to float32, as Determined does.
        assert out.dtype == torch.float32
        loss = nn.functional.mse_loss(out, y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x).float(), y)}


def test_use_amp_on_a_gpu_is_float16_with_a_checkpointed_scaler(
    checkpoint_dir: pathlib.Path,
) -> None:
    with pytorch.init(hparams={}, accelerator="gpu") as context:
        trial = AmpTrial(context)
        pytorch.Trainer(trial, context, logger=False).fit(
            max_length=pytorch.Batch(16),
            validation_period=pytorch.Batch(8),
            checkpoint_policy="none",
        )
    assert trial.dtypes == [torch.float16] * (16 + 2 * 2)  # and two validations of 2 batches
    scaler = context.engine.scaler
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()
    assert all(torch.isfinite(p).all() for p in trial.model.parameters())
    [path] = checkpoints(checkpoint_dir).values()
    state = ckpt.read_state_dict(path, weights_only=False)
    assert state[ckpt.SCALER]["scale"] == scaler.get_scale()


class ExplicitScalerTrial(AmpTrial):
    """Determined's explicit recipe: ``wrap_scaler`` + ``torch.autocast`` +
    ``backward(scaler.scale(loss))`` + ``step_optimizer(opt, scaler=scaler)``."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cuda"))
        self.model = context.wrap_model(
            nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        )
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.dtypes = []
        self.model[0].register_forward_hook(self._record)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.mse_loss(self.model(x).float(), y)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.opt, scaler=self.scaler)
        self.scaler.update()  # the user's job in this recipe (Determined's docs)
        return {"loss": loss}


def test_determineds_explicit_scaler_recipe_trains_on_a_gpu() -> None:
    def run(trial_class: Any) -> Any:
        torch.manual_seed(0)
        with pytorch.init(hparams={}, accelerator="gpu") as context:
            trial = trial_class(context)
            pytorch.Trainer(trial, context, logger=False).fit(
                max_length=pytorch.Batch(24), checkpoint_policy="none"
            )
        return trial

    explicit = run(ExplicitScalerTrial)
    # 24 training batches under autocast; the final validation has none (evaluate_batch does
    # not autocast in this recipe).
    assert explicit.dtypes[:24] == [torch.float16] * 24
    assert set(explicit.dtypes[24:]) == {torch.float32}
    assert explicit.scaler.get_scale() > 0
    # The same math as use_amp(): the two recipes give the same weights.
    one_line = run(AmpTrial)
    for a, b in zip(explicit.model.parameters(), one_line.model.parameters()):
        torch.testing.assert_close(a, b)


def test_a_gpu_checkpoint_loads_onto_the_cpu(checkpoint_dir: pathlib.Path) -> None:
    trained, _ = run_trial(
        pytorch,
        "MLPTrial",
        HPARAMS,
        init_kwargs={"accelerator": "gpu"},
        trainer_kwargs={"logger": False},
        max_length=pytorch.Batch(4),
        checkpoint_policy="none",
    )
    [path] = checkpoints(checkpoint_dir).values()
    loaded: Any = pytorch.load_trial_from_checkpoint_path(
        str(path), trial_class=TRIALS["MLPTrial"], torch_load_kwargs={"map_location": "cpu"}
    )
    for a, b in zip(loaded.model.parameters(), trained.model.parameters()):
        assert torch.equal(a.cpu(), b.cpu())
    state = torch.load(path / "state_dict.pth", map_location="cpu", weights_only=True)
    assert state["models_state_dict"][0]["0.weight"].device.type == "cpu"


def test_no_cuda_synchronisation_between_batches() -> None:
    """torch's sync debug mode flags every host-device synchronisation; it is on only between
    two training batches (batches 2..28 of the first pass, no report or period boundary)."""
    import warnings

    base = TRIALS["MLPTrial"]

    class Probe(base):  # type: ignore[misc, valid-type]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            torch.cuda.set_sync_debug_mode(0)  # the trial's own code may sync
            output = super().train_batch(batch, epoch_idx, batch_idx)
            torch.cuda.set_sync_debug_mode(1 if 2 <= batch_idx < 28 else 0)
            return output

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytorch.init(
            hparams={"lr": 0.01, "n": 256, "shuffle": True}, accelerator="gpu"
        ) as context:
            trial = Probe(context)
            pytorch.Trainer(trial, context, logger=False).fit(
                max_length=pytorch.Batch(40),
                reporting_period=pytorch.Batch(1000),
                validation_period=pytorch.Batch(1000),
                checkpoint_policy="none",
            )
    torch.cuda.set_sync_debug_mode(0)
    syncs = [f"{w.filename}:{w.lineno}" for w in caught if str(w.message).startswith(SYNC)]
    assert syncs == []


def test_no_cuda_synchronisation_between_validation_batches() -> None:
    """The same between two validation batches (1..14 of 16): each batch's metrics are copied
    to the host without waiting (pinned, non-blocking), and the pass waits once at its end,
    where Determined waits for each batch's copy."""
    import warnings

    base = TRIALS["MLPTrial"]
    batches = 16

    class Probe(base):  # type: ignore[misc, valid-type]
        def build_validation_data_loader(self) -> Any:
            return pytorch.DataLoader(regression_data(2 * batches, seed=1), batch_size=2)

        def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
            torch.cuda.set_sync_debug_mode(0)
            x, y = batch
            output = {"validation_loss": nn.functional.mse_loss(self.model(x), y)}
            torch.cuda.set_sync_debug_mode(1 if 1 <= batch_idx < batches - 2 else 0)
            return output

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytorch.init(hparams={"lr": 0.01, "n": 64}, accelerator="gpu") as context:
            trial = Probe(context)
            pytorch.Trainer(trial, context, logger=False).fit(
                max_length=pytorch.Batch(8), checkpoint_policy="none"
            )
    torch.cuda.set_sync_debug_mode(0)
    syncs = [f"{w.filename}:{w.lineno}" for w in caught if str(w.message).startswith(SYNC)]
    assert syncs == []


def test_a_validation_pass_ends_with_one_wait() -> None:
    """From the end of the first pass's last validation batch to the next training batch: the
    pass's reduction and report, Lightning's record of the metric (``self.log``) and its
    callbacks. One wait, for the metrics' copies to the host (``adapters/metrics.py``), where
    Determined waits once per batch. Lightning given the reduced float made two more per
    metric: its copy onto the device from pageable memory and the read back."""
    import warnings

    base = TRIALS["MLPTrial"]
    batches = 4

    class Probe(base):  # type: ignore[misc, valid-type]
        passes = 0

        def build_validation_data_loader(self) -> Any:
            return pytorch.DataLoader(regression_data(2 * batches, seed=1), batch_size=2)

        def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
            x, y = batch
            output = {"validation_loss": nn.functional.mse_loss(self.model(x), y)}
            if batch_idx == batches - 1:
                Probe.passes += 1
                torch.cuda.set_sync_debug_mode(1 if Probe.passes == 1 else 0)
            return output

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            torch.cuda.set_sync_debug_mode(0)
            return super().train_batch(batch, epoch_idx, batch_idx)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytorch.init(hparams={"lr": 0.01, "n": 64}, accelerator="gpu") as context:
            trial = Probe(context)
            pytorch.Trainer(trial, context, logger=False).fit(
                max_length=pytorch.Batch(8),
                validation_period=pytorch.Batch(4),
                checkpoint_policy="none",
            )
    torch.cuda.set_sync_debug_mode(0)
    assert Probe.passes == 2
    syncs = [f"{w.filename}:{w.lineno}" for w in caught if str(w.message).startswith(SYNC)]
    assert len(syncs) <= 1 and all("adapters/metrics.py" in s for s in syncs), syncs


def test_batches_reach_the_device_from_pinned_memory_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every host-to-device copy of a batch (training and validation) is non-blocking and reads
    page-locked memory: the loader pinned it (``pin_memory``'s default on CUDA)."""
    with pytorch.init(hparams=HPARAMS, accelerator="gpu") as context:
        trial = TRIALS["MLPTrial"](context)
        copies = record_host_to_device_copies(monkeypatch)
        pytorch.Trainer(trial, context, logger=False).fit(
            max_length=pytorch.Batch(8),
            validation_period=pytorch.Batch(4),
            checkpoint_policy="none",
        )
    # Lightning's bookkeeping of each metric logged (self.log) makes its 0-dimensional state
    # on the host and moves it to the device once, when the key is first logged: no batch.
    batches = [c for c in copies if c.shape != ()]
    once = [c for c in copies if c.shape == ()]
    assert len(batches) >= 16  # inputs and targets of 8 training batches, then validation's
    assert {c[:2] for c in batches} == {(True, True)}, batches
    assert len(once) < len(batches) // 2, once
