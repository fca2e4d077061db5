"""Between two training batches, and between two validation batches, det_lightning (and the
Lightning loop it drives) makes no host-device synchronisation: no ``.item()``, ``.tolist()``,
``.cpu()``, ``.numpy()``, ``bool()`` or ``float()`` of a tensor, away from reporting periods and
pass boundaries. On a GPU each of those stalls the pipeline; Determined's loop makes one per
training batch and one per validation batch (its metrics go to numpy as each batch ends)."""

from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from det_lightning import pytorch
from det_lightning.adapters.progress_bar import TrialProgressBar
from tests.fixtures.trials import make_trials, regression_data, seed_everything

SYNCING = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__")


class LogsOnce(Callback):
    """A Lightning callback that puts a tensor on the progress bar at the first batch: Lightning's
    own bar would turn it into a number (a sync) at every batch after."""

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            pl_module.log("probe", torch.tensor(1.5), prog_bar=True)


def count_syncs(monkeypatch: pytest.MonkeyPatch) -> "tuple[Dict[str, bool], List[str]]":
    """(a switch, the list): every syncing tensor method called while the switch is on."""
    between = {"on": False}
    calls: List[str] = []
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def counting(
            self: torch.Tensor,
            *args: Any,
            _name: str = name,
            _original: Any = original,
            **kwargs: Any,
        ) -> Any:
            if between["on"]:
                calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return between, calls


def test_no_host_sync_between_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    between, calls = count_syncs(monkeypatch)
    base = make_trials(pytorch)["MLPTrial"]

    class Probe(base):  # type: ignore[misc, valid-type]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            between["on"] = False  # the trial's own code may sync: not ours to count
            output = super().train_batch(batch, epoch_idx, batch_idx)
            # Batches 2..28 of the first pass (32 batches): no pass boundary, no report.
            between["on"] = 2 <= batch_idx < 28
            return output

    seed_everything(1)
    hparams: Dict[str, Any] = {"lr": 0.01, "n": 256, "shuffle": True}
    with pytorch.init(hparams=hparams) as context:
        trial = Probe(context)
        trainer = pytorch.Trainer(trial, context, enable_progress_bar=True, callbacks=[LogsOnce()])
        trainer.fit(
            max_length=pytorch.Batch(40),
            reporting_period=pytorch.Batch(1000),
            validation_period=pytorch.Batch(1000),
            checkpoint_policy="none",
        )
    between["on"] = False
    assert len(trial.seen) == 40
    assert calls == []
    # The bar showed the logged value (refreshed once, after the log), not a stale empty dict.
    bars = [c for c in trainer._lightning_trainer.callbacks if isinstance(c, TrialProgressBar)]
    assert len(bars) == 1 and bars[0]._shown["probe"] == 1.5


def test_no_host_sync_between_validation_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation reads no batch's metrics back until the pass ends (on a GPU their copies to
    the host are queued without waiting); the reduced numbers are Determined's (the parity tests
    compare them with the real Determined's)."""
    between, calls = count_syncs(monkeypatch)
    base = make_trials(pytorch)["MLPTrial"]
    batches = 16

    class Probe(base):  # type: ignore[misc, valid-type]
        def build_validation_data_loader(self) -> Any:
            return pytorch.DataLoader(regression_data(2 * batches, seed=1), batch_size=2)

        def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
            between["on"] = False
            x, y = batch
            output = {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}
            # Batches 1..14 of 16: no pass boundary (the pass's start and end may copy).
            between["on"] = 1 <= batch_idx < batches - 2
            return output

    seen: List[Any] = []
    reported: List[Dict[str, Any]] = []

    class Keeps(pytorch.PyTorchCallback):
        def on_validation_epoch_end(self, outputs: List[Dict[str, Any]]) -> None:
            seen.append(outputs)

        def on_validation_end(self, metrics: Dict[str, Any]) -> None:
            reported.append(dict(metrics))

    seed_everything(1)
    with pytorch.init(hparams={"lr": 0.01, "n": 64}) as context:
        trial = Probe(context)
        trial.build_callbacks = lambda: {"keeps": Keeps()}  # type: ignore[method-assign]
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(8), checkpoint_policy="none")
    between["on"] = False
    assert calls == []
    # What the callbacks got is Determined's form: one numpy array per batch and metric.
    (outputs,) = seen
    assert len(outputs) == batches
    values = [b["validation_loss"] for b in outputs]
    assert all(type(v) is np.ndarray and v.shape == () and v.dtype == np.float32 for v in values)
    model = trial.model.eval()
    with torch.no_grad():
        expected = [
            torch.nn.functional.mse_loss(model(x), y).numpy()
            for x, y in torch.utils.data.DataLoader(
                regression_data(2 * batches, seed=1), batch_size=2
            )
        ]
    assert [v.tobytes() for v in values] == [e.tobytes() for e in expected]
    # The default reducer, Determined's: the mean of the per-batch values.
    assert reported == [{"validation_loss": np.mean(np.stack(expected)).item()}]


def test_reported_metrics_reach_self_log_as_host_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The training averages and the reduced validation metrics, reduced on the host as
    Determined reduces them, go to Lightning's ``self.log`` (for callbacks' monitors and the
    progress bar) as 0-d host tensors. Given a float, Lightning would make the tensor on the
    module's device: on a GPU a copy from pageable memory that waits for all queued work, and
    another wait to read it back, per metric and report (``tests/gpu/test_cuda.py``)."""
    import lightning.pytorch as pl

    logged: List[Any] = []
    original = pl.LightningModule.log

    def spy(self: Any, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        logged.append((name, value))
        original(self, name, value, *args, **kwargs)

    monkeypatch.setattr(pl.LightningModule, "log", spy)
    seed_everything(1)
    with pytorch.init(hparams={"lr": 0.01, "n": 64}) as context:
        trial = make_trials(pytorch)["MLPTrial"](context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(
            max_length=pytorch.Batch(8),
            reporting_period=pytorch.Batch(2),
            validation_period=pytorch.Batch(4),
            checkpoint_policy="none",
        )
    names = [name for name, _ in logged]
    assert names.count("loss") == 4 and names.count("validation_loss") == 2, names
    for name, value in logged:
        assert isinstance(value, torch.Tensor), (name, value)
        assert (value.device.type, value.dtype, value.shape) == ("cpu", torch.float32, ()), name
    # Lightning's record of them stays on the host too, with the reported numbers.
    callback_metrics = trainer._lightning_trainer.callback_metrics
    assert callback_metrics["validation_loss"].device.type == "cpu"
    assert float(callback_metrics["validation_loss"]) == float(logged[-1][1])
