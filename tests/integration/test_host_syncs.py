"""Between two training batches det_lightning (and the Lightning loop it drives) makes no
host-device synchronisation: no ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
``bool()`` or ``float()`` of a tensor, away from reporting periods and pass boundaries. On a GPU
each of those stalls the pipeline; Determined's loop makes one per batch."""

from typing import Any, Dict, List

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from det_lightning import pytorch
from det_lightning.adapters.progress_bar import TrialProgressBar
from tests.fixtures.trials import make_trials, seed_everything

SYNCING = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__")


class LogsOnce(Callback):
    """A Lightning callback that puts a tensor on the progress bar at the first batch: Lightning's
    own bar would turn it into a number (a sync) at every batch after."""

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            pl_module.log("probe", torch.tensor(1.5), prog_bar=True)


def test_no_host_sync_between_batches(monkeypatch: pytest.MonkeyPatch) -> None:
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
