"""The same engine without det_lightning: a native ``LightningModule`` with manual optimization,
written as a Lightning user would (no per-step ``self.log``, no progress bar, no logger)."""

import pathlib
import time
from typing import Any, Dict, List, Optional

import lightning.pytorch as pl
import torch

import workloads
from common import Clock, save_costs, step_result
from workloads import Workload


class BenchModule(pl.LightningModule):
    def __init__(self, w: Workload, clock: Clock) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.w = w
        self.clock = clock
        self.model = workloads.build_model(w)
        self.loss_fn = workloads.loss_fn(w)

    def configure_optimizers(self) -> Any:
        return workloads.make_optimizer(self.w, self.model.parameters())

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(workloads.dataset(self.w, "train"),
                                           batch_size=self.w.batch_size)

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(workloads.dataset(self.w, "val"),
                                           batch_size=self.w.batch_size)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self.clock.start()
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        opt = self.optimizers()
        self.manual_backward(loss)
        opt.step()
        opt.zero_grad()
        self.clock.end()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("validation_loss", self.loss_fn(self.model(x), y))


def _trainer(w: Workload, steps: int, work: pathlib.Path, save: bool) -> pl.Trainer:
    callbacks: List[Any] = []
    if save:
        callbacks.append(pl.callbacks.ModelCheckpoint(
            dirpath=str(work / "lightning-ckpt"), every_n_train_steps=w.checkpoint_every,
            save_top_k=-1, save_last=False,
        ))
    return pl.Trainer(
        accelerator="cpu", devices=w.processes, strategy="ddp" if w.processes > 1 else "auto",
        max_steps=steps, max_epochs=-1, logger=False, enable_checkpointing=save,
        callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=str(work),
        val_check_interval=w.validation_every or None,
        limit_val_batches=1.0 if w.validation_every else 0,
    )


def _fit(w: Workload, steps: int, work: pathlib.Path, save: bool = False,
         ckpt_path: Optional[str] = None) -> Any:
    clock = Clock()
    module = BenchModule(w, clock)
    clock.called()
    trainer = _trainer(w, steps, work, save)
    trainer.fit(module, ckpt_path=ckpt_path)
    return clock, module, trainer


def run(w: Workload, work: pathlib.Path) -> Dict[str, Any]:
    start = time.perf_counter()
    clock, module, trainer = _fit(w, w.steps, work, save=w.measures == "checkpoint")
    result = step_result(clock, module.model, time.perf_counter() - start, trainer.world_size)
    if w.measures == "checkpoint":
        result["save_s"] = save_costs(clock, w.checkpoint_every)
        fresh, _, _ = _fit(w, 1, work / "fresh")
        saved = next((work / "lightning-ckpt").glob(f"*step={w.checkpoint_every}.ckpt"))
        resumed, _, _ = _fit(w, w.checkpoint_every + 1, work / "resumed", ckpt_path=str(saved))
        result["load_s"] = [resumed.to_first_step() - fresh.to_first_step()]
    return result
