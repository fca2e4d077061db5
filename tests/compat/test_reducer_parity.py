"""Validation reduction (per-metric Reducers, custom MetricReducers, wrapped functions) and
training-metric averages: the same numbers as the real Determined 0.38.1."""

from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from determined import pytorch as det_pytorch
from torch import nn

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import regression_data, seed_everything

pytestmark = pytest.mark.interop


def make_trial(api: Any) -> Any:
    class CountReducer(api.MetricReducer):
        """Counts records and sums |error|; the mean absolute error across all of them."""

        def __init__(self) -> None:
            self.reset()

        def reset(self) -> None:
            self.count, self.total = 0, 0.0

        def update(self, errors: torch.Tensor) -> None:
            self.count += len(errors)
            self.total += float(errors.abs().sum())

        def per_slot_reduce(self) -> Any:
            return self.count, self.total

        def cross_slot_reduce(self, per_slot: List[Any]) -> Any:
            count = sum(c for c, _ in per_slot)
            return {"mae": sum(t for _, t in per_slot) / count, "records": count}

    class ReducerTrial(api.PyTorchTrial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(nn.Linear(8, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
            self.counter = context.wrap_reducer(CountReducer(), for_training=False)
            self.maxes = context.wrap_reducer(
                lambda values: float(np.max(values)), name="max_err", for_validation=False
            )
            self.workloads: List[Dict[str, Any]] = []

        def build_training_data_loader(self) -> Any:
            return api.DataLoader(regression_data(40), batch_size=6)

        def build_validation_data_loader(self) -> Any:
            return api.DataLoader(regression_data(30, seed=2), batch_size=7)  # a short last batch

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            out = self.model(x)
            loss = nn.functional.mse_loss(out, y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            self.maxes.update(float((out - y).detach().abs().max()))
            return {"loss": loss, "bias": self.model.bias.detach().clone()}

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            err = self.model(x) - y
            self.counter.update(err)
            return {
                "avg_loss": (err**2).mean(),
                "sum_loss": (err**2).sum(),
                "max_loss": (err**2).max(),
                "min_loss": (err**2).min(),
            }

        def evaluation_reducer(self) -> Dict[str, Any]:
            return {
                "avg_loss": api.Reducer.AVG,
                "sum_loss": api.Reducer.SUM,
                "max_loss": api.Reducer.MAX,
                "min_loss": api.Reducer.MIN,
            }

        def build_callbacks(self) -> Dict[str, Any]:
            trial = self

            class Workloads(api.PyTorchCallback):
                def on_training_workload_end(self, avg_metrics: Dict, batch_metrics: List) -> None:
                    trial.workloads.append({k: v for k, v in avg_metrics.items()})

                def on_validation_end(self, metrics: Dict[str, Any]) -> None:
                    trial.workloads.append({"val": {k: float(v) for k, v in metrics.items()}})

            return {"workloads": Workloads()}

    return ReducerTrial


def _run(api: Any) -> Any:
    seed_everything(0)
    with api.init(hparams={}) as context:
        trial = make_trial(api)(context)
        api.Trainer(trial, context).fit(
            max_length=api.Batch(13), validation_period=api.Batch(5), reporting_period=api.Batch(3)
        )
    return trial


def test_reducers_and_averages_match_real_determined() -> None:
    theirs, ours = _run(det_pytorch), _run(dl_pytorch)
    assert len(ours.workloads) == len(theirs.workloads) > 4
    for mine, real in zip(ours.workloads, theirs.workloads):
        assert mine.keys() == real.keys()
        for key in real:
            np.testing.assert_array_equal(
                np.asarray(mine[key], dtype=object), np.asarray(real[key], dtype=object)
            )
    validation = [w["val"] for w in ours.workloads if "val" in w]
    assert validation[0]["records"] == 30  # the custom reducer saw every record once
    assert validation[0]["sum_loss"] > validation[0]["max_loss"] >= validation[0]["min_loss"]
