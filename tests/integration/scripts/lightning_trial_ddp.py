"""``LightningTrial`` under ``lightning.Trainer(devices=2, strategy="ddp")`` on CPU.

    python lightning_trial_ddp.py OUT_DIR [stop]

Lightning re-runs this script for the second process. Each rank writes ``OUT_DIR/rank<r>.json``:
the ranks and device the trial saw in its ``__init__``, its weight after 3 steps, and the
validation metrics of ``trainer.validate``. With ``stop``, rank 1 alone calls
``set_stop_requested(True)`` at its third batch of a 40-step fit, and no validation runs.
"""

import json
import pathlib
import sys
from typing import Any, Dict

import lightning as L
import torch
from torch import nn

from det_lightning import pytorch
from det_lightning.adapters import LightningTrial


class OneVar(pytorch.PyTorchTrial):
    """y = 2x with one weight from 0 and SGD: the weight has a closed form."""

    def __init__(self, context: Any) -> None:
        self.context = context
        dist = context.distributed
        self.seen = {"rank": dist.rank, "size": dist.size, "device": str(context.device)}
        self.model = context.wrap_model(nn.Linear(1, 1, bias=False))
        with torch.no_grad():
            self.model.weight.zero_()
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.5))

    def build_training_data_loader(self) -> Any:
        x = torch.arange(1, 17, dtype=torch.float32).reshape(-1, 1) / 16
        return pytorch.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=4)

    def build_validation_data_loader(self) -> Any:
        x = torch.arange(1, 5, dtype=torch.float32).reshape(-1, 1)
        return pytorch.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=2)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.mean((self.model(x) - y) ** 2)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        return {"validation_loss": torch.mean((self.model(x) - y) ** 2)}


class StopsOnRankOne(OneVar):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == 2 and self.context.distributed.rank == 1:
            self.context.set_stop_requested(True)
        return super().train_batch(batch, epoch_idx, batch_idx)


def main(out: pathlib.Path, stop: bool) -> None:
    module = LightningTrial(StopsOnRankOne if stop else OneVar)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=40 if stop else 3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=50 if stop else 1,
        limit_val_batches=0 if stop else None,
    )
    trainer.fit(module)
    validation = [] if stop else trainer.validate(module, verbose=False)
    record = {
        **module.trial.seen,
        "weight": module.trial.model.weight.item(),
        "validation": validation,
        "batches_trained": module.progress.batches_trained,
    }
    out.mkdir(exist_ok=True)
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), sys.argv[2:] == ["stop"])
