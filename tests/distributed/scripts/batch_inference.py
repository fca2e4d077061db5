"""Determined's ``torch_batch_process`` example's shape: a processor that writes each batch's
items through ``upload_path()`` and sums them with a reducer, run under
``python3 -m determined.launch.torch_distributed``. Each rank appends what it processed to
``events-rank<N>.jsonl``; with ``$HOLD_AT`` it writes ``held-rank<N>`` at that batch and waits
for ``release`` (a test's chance to send a signal while every rank is mid-shard)."""

import json
import os
import pathlib
import time
from typing import Any, List

import torch
from determined import pytorch
from determined.pytorch import experimental
from torch.utils import data


class Items(data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i])


class Total(pytorch.MetricReducer):
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0

    def update(self, value: int) -> None:
        self.total += value

    def per_slot_reduce(self) -> int:
        return self.total

    def cross_slot_reduce(self, per_slot_metrics: List[int]) -> int:
        return sum(per_slot_metrics)


class Processor(experimental.TorchBatchProcessor):
    def __init__(self, context: experimental.TorchBatchProcessorContext) -> None:
        self.context = context
        self.rank = context.get_distributed_rank()
        assert context.get_distributed_size() == 2
        assert context.get_hparams() == {"model": "linear"}
        self.total = context.wrap_reducer(Total(), name="total")
        self.count = context.wrap_reducer(lambda values: sum(values), name="count")

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        items = batch[:, 0].tolist()
        with open(f"events-rank{self.rank}.jsonl", "a") as events:
            events.write(json.dumps([batch_idx, items]) + "\n")
        self.total.update(sum(items))
        self.count.update(len(items))
        with self.context.upload_path() as path:
            (path / f"b{batch_idx}.json").write_text(json.dumps(items))
        if str(batch_idx) == os.environ.get("HOLD_AT"):
            pathlib.Path(f"held-rank{self.rank}").touch()
            while not pathlib.Path("release").exists():
                time.sleep(0.05)


if __name__ == "__main__":
    experimental.torch_batch_process(Processor, Items(), batch_size=2, checkpoint_interval=2)
