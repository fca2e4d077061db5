"""One ``PyTorchTrial`` for both ``determined.pytorch`` (the real 0.38.1) and
``det_lightning.pytorch``: the user's code is the same, only the import differs."""

import os
import pathlib
import time
from typing import Any, Dict, Optional

import workloads
from common import Clock, find_checkpoint, save_costs, step_result
from workloads import Workload


def make_trial(api: Any, w: Workload, clock: Clock) -> type:
    """A trial class for ``api`` (a ``determined.pytorch``-like module)."""

    class BenchTrial(api.PyTorchTrial):  # type: ignore[misc,name-defined]
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(workloads.build_model(w))
            self.opt = context.wrap_optimizer(workloads.make_optimizer(w, self.model.parameters()))
            self.loss_fn = workloads.loss_fn(w)

        def build_training_data_loader(self) -> Any:
            return api.DataLoader(workloads.dataset(w, "train"), batch_size=w.batch_size)

        def build_validation_data_loader(self) -> Any:
            return api.DataLoader(workloads.dataset(w, "val"), batch_size=w.batch_size)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            clock.start()
            x, y = batch
            loss = self.loss_fn(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            clock.end()
            return {"loss": loss}

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            return {"validation_loss": self.loss_fn(self.model(x), y)}

    return BenchTrial


def _distributed(api_name: str, w: Workload) -> Dict[str, Any]:
    if w.processes == 1:
        return {}
    import torch

    if api_name == "determined":
        from determined import core

        # Determined's local mode leaves the process group to the user (torchrun sets the env
        # variables; USE_TORCH_DISTRIBUTED=1 is what Determined's own launcher would add).
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo")
        return {"distributed": core.DistributedContext.from_torch_distributed()}
    return {"accelerator": "cpu", "devices": w.processes, "strategy": "ddp"}


def _fit(api: Any, api_name: str, w: Workload, steps: int, tensorboard: bool,
         latest: Optional[str] = None, policy: str = "best") -> Any:
    clock = Clock()
    trial_cls = make_trial(api, w, clock)
    with api.init(hparams={}, enable_tensorboard_logging=tensorboard,
                  **_distributed(api_name, w)) as context:
        trial = trial_cls(context)
        clock.called()
        trainer = api.Trainer(trial, context)
        trainer.fit(
            max_length=api.Batch(steps),
            validation_period=api.Batch(w.validation_every) if w.validation_every else None,
            checkpoint_period=api.Batch(w.checkpoint_every) if w.checkpoint_every else None,
            checkpoint_policy=policy,
            latest_checkpoint=latest,
        )
    return clock, trial


def run(api_name: str, w: Workload, work: pathlib.Path, tensorboard: bool = False) -> Dict[str, Any]:
    if api_name == "determined":
        from determined import pytorch as api
        root = pathlib.Path(os.environ["XDG_DATA_HOME"])
    else:
        from det_lightning import pytorch as api
        root = pathlib.Path(os.environ["DET_LIGHTNING_CHECKPOINT_DIR"])
    # No checkpoints after validations (native Lightning has none to compare with); the
    # periodic ones of the checkpoint workload and the final one are written regardless.
    policy = "none"
    start = time.perf_counter()
    clock, trial = _fit(api, api_name, w, w.steps, tensorboard, policy=policy)
    result = step_result(clock, trial.model, time.perf_counter() - start,
                         trial.context.distributed.get_size())
    if w.measures == "checkpoint":
        result["save_s"] = save_costs(clock, w.checkpoint_every)
        saved = find_checkpoint(root, w.checkpoint_every)
        fresh, _ = _fit(api, api_name, w, 1, tensorboard, policy=policy)
        resumed, _ = _fit(api, api_name, w, w.checkpoint_every + 1, tensorboard,
                          latest=str(saved) if api_name != "determined" else saved.name,
                          policy=policy)
        result["load_s"] = [resumed.to_first_step() - fresh.to_first_step()]
    return result
