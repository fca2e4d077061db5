"""A small trial that records what each rank saw, for the distributed tests.

    python probe.py --out DIR [--devices 2 --accelerator cpu] [--batches 8] [--resume latest] ...
    torchrun --nproc_per_node=2 probe.py --out DIR ...

Each rank writes ``DIR/rank<r>.json``: the ranks seen in the trial's ``__init__``, every
callback event, the per-batch training losses, the validation metrics, the ids a custom
``MetricReducer`` saw, the number of gradient all-reduces, and the final weights.
"""

import argparse
import atexit
import json
import os
import pathlib
from typing import Any, Dict, List

import lightning.pytorch as pl
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from det_lightning import core, pytorch

RECORD: Dict[str, Any] = {
    "events": [],
    "losses": [],
    "validations": [],
    "weights_at_validation": [],
    "allreduces": 0,
}


IN_GRADIENT_HOOK = False


def weights(model: nn.Module) -> List[float]:
    return [v for p in model.parameters() for v in p.detach().flatten().tolist()]


def dataset(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(torch.arange(n), x, y)


class SeenIds(pytorch.MetricReducer):
    """The ids of every validation record, from every rank: each must appear exactly once."""

    def __init__(self) -> None:
        self.ids: List[int] = []

    def reset(self) -> None:
        self.ids = []

    def update(self, ids: List[int]) -> None:
        self.ids.extend(ids)

    def per_slot_reduce(self) -> List[int]:
        return self.ids

    def cross_slot_reduce(self, per_slot_metrics: List[List[int]]) -> Dict[str, Any]:
        seen = sorted(i for ids in per_slot_metrics for i in ids)
        return {"seen_ids": seen, "ranks_reporting": len(per_slot_metrics)}


class Recorder(pytorch.PyTorchCallback):
    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Any) -> None:
        RECORD["events"].append(["startup", first_batch_idx])

    def on_training_workload_end(self, avg_metrics: Dict, batch_metrics: List) -> None:
        RECORD["losses"].extend(float(m["loss"]) for m in batch_metrics)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        RECORD["validations"].append(
            {k: (v if isinstance(v, list) else float(v)) for k, v in metrics.items()}
        )
        RECORD["weights_at_validation"].append(weights(self.model))

    def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
        RECORD["events"].append(["checkpoint_load", 0])

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        RECORD["events"].append(["checkpoint_save", 0])

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        RECORD["events"].append(["checkpoint_upload_end", 0])

    def on_trial_shutdown(self) -> None:
        RECORD["events"].append(["shutdown", 0])


class BackgroundRecorder(Recorder):
    """The recorder without the upload hook: a callback on a write hook would keep every write
    in the training thread (as in Determined), and this run is for background writes."""

    on_checkpoint_upload_end = pytorch.PyTorchCallback.on_checkpoint_upload_end


class CrashOnSave(pytorch.PyTorchCallback):
    """Raises on one rank while a checkpoint is being saved: on the chief before it writes
    (``on_checkpoint_save_start`` runs there alone, as in Determined), on another rank in the
    hook every rank runs once the checkpoint is stored."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def _crash(self) -> None:
        raise RuntimeError(f"probe crash on rank {self.rank} while checkpointing")

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        self._crash()

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self._crash()


class CountAllreduces(pl.Callback):
    """Counts DDP's gradient all-reduces (one bucket per backward for this small model)."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        model = trainer.strategy.model
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model.register_comm_hook(None, self._hook)
            RECORD["ddp"] = {
                "wraps": type(model.module).__name__,
                "find_unused_parameters": model.find_unused_parameters,
            }

    @staticmethod
    def _hook(
        state: Any, bucket: torch.distributed.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        global IN_GRADIENT_HOOK
        RECORD["allreduces"] += 1
        IN_GRADIENT_HOOK = True
        try:
            return default_hooks.allreduce_hook(None, bucket)
        finally:
            IN_GRADIENT_HOOK = False


class TraceHooks(pl.Callback):
    """Records the loop state a callback sees at each per-batch hook (RECORD["trace"]): the
    lean path (adapters/lightning/lean.py) must leave it exactly as Lightning's own loop does."""

    def __init__(self) -> None:
        RECORD["trace"] = []
        for name in (
            "on_train_batch_start",
            "on_before_backward",
            "on_after_backward",
            "on_before_optimizer_step",
            "on_train_batch_end",
            "on_validation_start",
            "on_validation_end",
        ):
            setattr(self, name, self._recorder(name))

    @staticmethod
    def _recorder(name: str) -> Any:
        def record(trainer: pl.Trainer, pl_module: Any, *args: Any) -> None:
            loop = trainer.fit_loop.epoch_loop
            RECORD["trace"].append(
                [
                    name,
                    trainer.global_step,
                    loop._batches_that_stepped,
                    str(loop.batch_progress.total),
                    pl_module._current_fx_name,
                    sorted(trainer.callback_metrics),
                ]
            )

        return record


class CountCollectives(pl.Callback):
    """Counts the torch.distributed collectives each training batch is followed by (between its
    train_batch and the next one's): RECORD["collectives"][batch number] = count."""

    NAMES = (
        "all_reduce",
        "broadcast",
        "all_gather",
        "all_gather_object",
        "gather",
        "gather_object",
        "broadcast_object_list",
        "barrier",
        "reduce",
        "all_to_all",
    )

    def __init__(self) -> None:
        self.batch = 0
        self.originals: Dict[str, Any] = {}
        RECORD["collectives"] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for name in self.NAMES:
            original = getattr(torch.distributed, name)
            self.originals[name] = original
            setattr(torch.distributed, name, self._counting(original))

    def _counting(self, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if not IN_GRADIENT_HOOK:  # DDP's gradient all-reduce is the training, not overhead
                key = str(self.batch)
                RECORD["collectives"][key] = RECORD["collectives"].get(key, 0) + 1
            return original(*args, **kwargs)

        return counted

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.batch += 1

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for name, original in self.originals.items():
            setattr(torch.distributed, name, original)


class ProbeTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, args: argparse.Namespace) -> None:
        self.context = context
        self.args = args
        dist = context.distributed
        RECORD["init"] = {
            "rank": dist.get_rank(),
            "size": dist.get_size(),
            "local_rank": dist.get_local_rank(),
            "local_size": dist.get_local_size(),
            "cross_rank": dist.get_cross_rank(),
            "cross_size": dist.get_cross_size(),
            "per_slot_batch_size": context.get_per_slot_batch_size(),
            "global_batch_size": context.get_global_batch_size(),
            "device": str(context.device),
            "process_group": torch.distributed.is_initialized(),
            "gathered_ranks": dist.allgather(dist.get_rank()),
            "gathered_by_chief": dist.gather(dist.get_rank()),
            "local_ranks": dist.allgather_local(dist.get_rank()),
            "local_chief": dist.broadcast_local(dist.get_rank()),
        }
        if dist.get_cross_rank() == 0:
            # Node-local: the other nodes' ranks do not take part (they would hang otherwise).
            RECORD["init"]["node0_only"] = dist.gather_local(dist.get_local_rank())
        self.model = context.wrap_model(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=0.2, momentum=0.9)
        )
        self.seen = context.wrap_reducer(SeenIds(), for_training=False)
        if args.unused_parameter:  # DDP needs find_unused_parameters=True for this one
            self.unused = context.wrap_model(nn.Linear(1, 1))

    def build_callbacks(self) -> Dict[str, pytorch.PyTorchCallback]:
        recorder = BackgroundRecorder if self.args.background_writes else Recorder
        callbacks: Dict[str, pytorch.PyTorchCallback] = {"recorder": recorder(self.model)}
        if self.args.crash_phase == "checkpoint" and self._rank() == self.args.crash_rank:
            callbacks["crash"] = CrashOnSave(self._rank())
        return callbacks

    def _rank(self) -> int:
        return self.context.distributed.get_rank()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            dataset(64, seed=0), batch_size=self.context.get_per_slot_batch_size()
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            dataset(self.args.val_size, seed=1), batch_size=self.context.get_per_slot_batch_size()
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        if "priorities" not in RECORD:
            RECORD["priorities"] = _priorities()
        rank = self._rank()
        if (rank, batch_idx) == (self.args.crash_rank, self.args.crash_batch):
            raise RuntimeError(f"probe crash on rank {rank} at batch {batch_idx}")
        if (rank, batch_idx) == (self.args.stop_rank, self.args.stop_batch):
            self.context.set_stop_requested(True)
        _, x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        ids, x, y = batch
        if self.args.crash_phase == "validation" and self._rank() == self.args.crash_rank:
            raise RuntimeError(f"probe crash on rank {self._rank()} while validating")
        self.seen.update(ids.tolist())
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}


class FullDatasetProbe(ProbeTrial):
    """Validates with ``evaluate_full_dataset``, which must run on the chief only."""

    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
        RECORD["events"].append(["evaluate_full_dataset", self.context.distributed.get_rank()])
        losses = [nn.functional.mse_loss(self.model(x), y).item() for _, x, y in data_loader]
        self.seen.update([])
        return {"validation_loss": sum(losses) / len(losses)}


def _priorities() -> Dict[str, Any]:
    """The nice values of the training thread and of gloo's socket threads, as training runs."""
    tasks = pathlib.Path("/proc/self/task")
    loops = [
        int(task.name)
        for task in tasks.iterdir()
        if (task / "comm").read_text().strip() == "gloo_tcp_loop"
    ]
    return {
        "training": os.getpriority(os.PRIO_PROCESS, 0),
        "gloo_loops": [os.getpriority(os.PRIO_PROCESS, tid) for tid in loops],
    }


# Thread names c10d and gloo give their threads: a process group's workers and transport loop,
# and the TCPStore server on rank 0. Any still running lives into the interpreter's teardown.
C10D_THREADS = ("gloo", "tcpstore", "c10d")


def _c10d_threads() -> List[str]:
    tasks = pathlib.Path("/proc/self/task")
    names = [(task / "comm").read_text().strip() for task in tasks.iterdir()]
    return sorted(name for name in names if any(tag in name for tag in C10D_THREADS))


def _record_process_group_at_exit(out: pathlib.Path) -> None:
    """Whether a process group is still open, or its threads still run, when Python's own
    teardown is about to begin."""
    if "init" in RECORD:
        rank = RECORD["init"]["rank"]
        record = {
            "process_group": torch.distributed.is_initialized(),
            "c10d_threads": _c10d_threads(),
        }
        if "open_after_init" in RECORD:
            record["open_after_init"] = RECORD["open_after_init"]
        (out / f"rank{rank}-exit.json").write_text(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser()
    pytorch.add_launch_arguments(parser)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--global-batch-size", type=int, default=8)
    parser.add_argument("--aggregation-frequency", type=int, default=1)
    parser.add_argument("--val-size", type=int, default=32)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-batch", type=int, default=-1)
    parser.add_argument(
        "--crash-phase",
        choices=["validation", "checkpoint"],
        default=None,
        help="raise on --crash-rank while validating or saving a checkpoint",
    )
    parser.add_argument(
        "--stop-rank",
        type=int,
        default=-1,
        help="this rank alone calls set_stop_requested(True) at --stop-batch",
    )
    parser.add_argument("--stop-batch", type=int, default=-1)
    parser.add_argument("--validation-period", type=int, default=4)
    parser.add_argument("--reporting-period", type=int, default=2)
    parser.add_argument(
        "--checkpoint-period",
        type=int,
        default=0,
        help="checkpoint every so many batches (default: only at the end)",
    )
    parser.add_argument("--count-collectives", action="store_true")
    parser.add_argument("--full-dataset", action="store_true")
    parser.add_argument("--unused-parameter", action="store_true")
    parser.add_argument(
        "--find-unused-parameters",
        action="store_true",
        help="init(strategy=DDPStrategy(find_unused_parameters=True))",
    )
    parser.add_argument(
        "--background-writes",
        action="store_true",
        help="no callback on the write hooks: checkpoints written in the background",
    )
    parser.add_argument(
        "--torch-distributed",
        action="store_true",
        help="Determined's recipe: init_process_group + from_torch_distributed",
    )
    args = parser.parse_args()
    distributed = None
    if args.torch_distributed:
        torch.distributed.init_process_group("gloo")
        distributed = core.DistributedContext.from_torch_distributed()
    # Registered before init(), so it runs after any exit handler init() registers (LIFO).
    atexit.register(_record_process_group_at_exit, pathlib.Path(args.out))
    launch = pytorch.launch_kwargs(args)
    if args.find_unused_parameters:
        launch["strategy"] = pl.strategies.DDPStrategy(find_unused_parameters=True)
    with pytorch.init(
        hparams={"global_batch_size": args.global_batch_size},
        exp_conf={"reproducibility": {"experiment_seed": 7}},
        distributed=distributed,
        aggregation_frequency=args.aggregation_frequency,
        **launch,
    ) as context:
        trial = (FullDatasetProbe if args.full_dataset else ProbeTrial)(context, args)
        callbacks: List[pl.Callback] = [CountAllreduces(), TraceHooks()]
        if args.count_collectives:
            callbacks.append(CountCollectives())
        trainer = pytorch.Trainer(trial, context, callbacks=callbacks, enable_progress_bar=False)
        trainer.fit(
            max_length=pytorch.Batch(args.batches),
            validation_period=pytorch.Batch(args.validation_period),
            reporting_period=pytorch.Batch(args.reporting_period),
            checkpoint_period=(
                pytorch.Batch(args.checkpoint_period) if args.checkpoint_period else None
            ),
            checkpoint_policy="none",
            latest_checkpoint=args.resume,
        )
        RECORD["weights"] = weights(trial.model)
        assert trainer.result is not None
        RECORD["batches_trained"] = trainer.result.batches_trained
        RECORD["device_after"] = str(next(trial.model.parameters()).device)
        RECORD["epoch_loop"] = type(trainer._lightning_trainer.fit_loop.epoch_loop).__name__
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{RECORD['init']['rank']}.json").write_text(json.dumps(RECORD))
    if args.torch_distributed:
        # The recipe's last step: the script closes the group it made; init() left it open.
        RECORD["open_after_init"] = torch.distributed.is_initialized()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
