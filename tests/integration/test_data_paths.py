"""The data paths a trial can take: worker processes, plain torch loaders (refused unless the
trial opts out), IterableDatasets sharded by hand, and batches left where they are."""

import pathlib
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils import data

from det_lightning import pytorch
from tests.fixtures.run import run_trial


def test_worker_processes_resume_exactly(checkpoint_dir: pathlib.Path) -> None:
    """With workers the loader prefetches, so each pass's shuffle is drawn earlier in the global
    random stream than without them (as in torch and Determined; the order parity with
    Determined for workers is in tests/compat). A resumed run still continues exactly."""
    hparams = {"num_workers": 2, "lr": 0.01}
    # Every run validates at batch 5, where the first one stops (a run's end always validates).
    every5 = pytorch.Batch(5)
    straight, _ = run_trial(
        pytorch,
        "MLPTrial",
        hparams,
        seed=4,
        max_length=pytorch.Batch(14),
        validation_period=every5,
        trainer_kwargs={"checkpoint_dir": str(checkpoint_dir.parent / "straight")},
    )
    first, _ = run_trial(
        pytorch, "MLPTrial", hparams, seed=4, max_length=every5, validation_period=every5
    )
    resumed, _ = run_trial(
        pytorch,
        "MLPTrial",
        hparams,
        seed=99,
        max_length=pytorch.Batch(14),
        validation_period=every5,
        latest_checkpoint="latest",
    )
    assert first.seen + resumed.seen == straight.seen  # batch 5 is mid-epoch (8 per epoch)
    for mine, expected in zip(resumed.model.parameters(), straight.model.parameters()):
        assert torch.equal(mine, expected)


class _PlainLoaderTrial(pytorch.PyTorchTrial):
    """Returns torch loaders; opts out of the reproducibility check when told to."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        if context.get_hparam("opt_out"):
            context.experimental.disable_dataset_reproducibility_checks()
        if context.get_hparam("keep_on_host"):
            context.experimental.disable_auto_to_device()
        self.batch_types: List[type] = []
        self.records: List[int] = []

    def build_training_data_loader(self) -> Any:
        return data.DataLoader(
            _ShardedStream(self.context.distributed), batch_size=3, collate_fn=_numpy_collate
        )

    def build_validation_data_loader(self) -> Any:
        return data.DataLoader(
            _ShardedStream(self.context.distributed), batch_size=4, collate_fn=_numpy_collate
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        self.batch_types.append(type(batch["x"]))
        self.records.extend(int(v) for v in np.asarray(batch["id"]))
        x = torch.as_tensor(batch["x"])
        loss = nn.functional.mse_loss(self.model(x), torch.zeros(len(x), 1))
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        return {"validation_loss": float(np.mean(np.asarray(batch["x"])))}


class _ShardedStream(data.IterableDataset):
    """Ten records; each rank takes every size-th one (the recipe in samplers' docstring)."""

    def __init__(self, distributed: Any) -> None:
        self.rank, self.size = distributed.get_rank(), distributed.get_size()

    def __iter__(self) -> Any:
        for i in range(self.rank, 10, self.size):
            yield {"id": i, "x": np.full(2, i, dtype=np.float32)}


def _numpy_collate(records: List[Dict[str, Any]]) -> Dict[str, np.ndarray]:
    return {key: np.stack([np.asarray(r[key]) for r in records]) for key in records[0]}


def _fit(opt_out: bool, keep_on_host: bool, batches: int) -> _PlainLoaderTrial:
    with pytorch.init(hparams={"opt_out": opt_out, "keep_on_host": keep_on_host}) as context:
        trial = _PlainLoaderTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(batches))
    return trial


def test_a_plain_torch_loader_is_refused_with_the_fix_named() -> None:
    with pytest.raises(RuntimeError, match="disable_dataset_reproducibility_checks"):
        _fit(opt_out=False, keep_on_host=False, batches=2)


def test_an_iterable_dataset_trains_through_its_end_once_opted_out() -> None:
    trial = _fit(opt_out=True, keep_on_host=False, batches=6)
    # 10 records in batches of 3 make 4 batches per pass; the 6 batches run into a second pass.
    assert trial.records == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5]
    assert set(trial.batch_types) == {torch.Tensor}  # moved (numpy -> tensor) by auto to_device


def test_disable_auto_to_device_hands_batches_over_untouched() -> None:
    trial = _fit(opt_out=True, keep_on_host=True, batches=2)
    assert set(trial.batch_types) == {np.ndarray}
