"""Custom reducers' values keep the types the real Determined 0.38.1 gives them (Python numbers
stay Python numbers, tensors become numpy arrays of the same shape, numpy values stay numpy), in
the callbacks and in the reported (logged) metrics."""

import logging
import re
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
from torch import nn

from tests.fixtures.trials import regression_data, seed_everything

pytestmark = pytest.mark.interop


def make_trial(api: Any, full_dataset: bool) -> Any:
    class Counter(api.MetricReducer):
        def __init__(self) -> None:
            self.reset()

        def reset(self) -> None:
            self.labels = torch.zeros(())

        def update(self, labels: torch.Tensor) -> None:
            self.labels = self.labels + labels.sum()

        def per_slot_reduce(self) -> Any:
            return self.labels

        def cross_slot_reduce(self, per_slot: List[Any]) -> Any:
            return sum(per_slot)  # a 0-d tensor

    class ReducerTypes(api.PyTorchTrial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(nn.Linear(8, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
            self.counter = context.wrap_reducer(Counter(), name="label_sum")
            self.mean = context.wrap_reducer(lambda v: float(np.mean(v)), name="py_float")
            self.many = context.wrap_reducer(
                lambda v: {
                    "count": len(v),
                    "np_mean": np.mean(v),
                    "first": torch.tensor([v[0]]),
                    "listed": list(v[:2]),
                }
            )
            self.seen: List[Tuple[str, Dict[str, Any]]] = []

        def _update(self, y: torch.Tensor) -> None:
            self.counter.update(y)
            self.mean.update(float(y.mean()))
            self.many.update(float(y.sum()))

        def build_training_data_loader(self) -> Any:
            return api.DataLoader(regression_data(16), batch_size=4)

        def build_validation_data_loader(self) -> Any:
            return api.DataLoader(regression_data(8, seed=2), batch_size=4)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            self._update(y)
            return loss

        def build_callbacks(self) -> Dict[str, Any]:
            trial = self

            class Keep(api.PyTorchCallback):
                def on_training_workload_end(self, avg_metrics: Dict, batch_metrics: List) -> None:
                    trial.seen.append(("training", dict(avg_metrics)))

                def on_validation_end(self, metrics: Dict[str, Any]) -> None:
                    trial.seen.append(("validation", dict(metrics)))

            return {"keep": Keep()}

    class PerBatch(ReducerTypes):
        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            self._update(y)
            return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}

    class FullDataset(ReducerTypes):
        def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
            for _, y in data_loader:
                self._update(y)
            return {"validation_loss": 1.0}

    return FullDataset if full_dataset else PerBatch


def _run(api: Any, full_dataset: bool) -> List[Tuple[str, Dict[str, Any]]]:
    seed_everything(0)
    with api.init(hparams={}, enable_tensorboard_logging=False) as context:
        trial = make_trial(api, full_dataset)(context)
        api.Trainer(trial, context).fit(
            max_length=api.Batch(4), validation_period=api.Batch(2), reporting_period=api.Batch(2)
        )
    return trial.seen


def _described(value: Any) -> Any:
    """Type, dtype and shape all the way down, then the value."""
    if isinstance(value, list):
        return ("list", [_described(v) for v in value])
    return (
        type(value).__name__,
        str(getattr(value, "dtype", "")),
        np.shape(value),
        np.asarray(value).tolist(),
    )


@pytest.mark.parametrize("full_dataset", [False, True])
def test_custom_reducer_values_have_determineds_types(full_dataset: bool) -> None:
    from determined import pytorch as det_pytorch

    from det_lightning import pytorch as dl_pytorch

    theirs = _run(det_pytorch, full_dataset)
    ours = _run(dl_pytorch, full_dataset)
    assert [kind for kind, _ in ours] == [kind for kind, _ in theirs]
    assert len(theirs) == 4
    for (_, mine), (_, real) in zip(ours, theirs):
        assert list(mine) == list(real)
        for name in real:
            assert _described(mine[name]) == _described(real[name]), name


def _logged_metrics(line: str) -> Dict[str, Any]:
    """The ``metrics={...}`` of a ``report_*_metrics(...)`` line, read back (Determined's lines
    hold numpy reprs such as ``array(2., dtype=float32)``)."""
    body = line[line.index("metrics=") + len("metrics=") : line.rindex(")")]
    names = {
        "array": np.array,
        "float32": np.float32,
        "float64": np.float64,
        "np": np,
        "int64": np.int64,
        "dtype": np.dtype,
    }
    return dict(eval(body, {"__builtins__": {}}, names))  # our own test's log lines


@pytest.mark.parametrize("full_dataset", [False, True])
def test_reported_metrics_read_as_determineds(
    full_dataset: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``report_*_metrics(...)`` lines: Determined's wording, the same metrics in the same
    order with the same values, printed as plain numbers to 4 significant digits where
    Determined prints numpy reprs (``array(2., dtype=float32)``, ``np.float64(...)``): a
    deliberate difference (docs/differences.md)."""
    from determined import pytorch as det_pytorch

    from det_lightning import pytorch as dl_pytorch

    def reported(api: Any) -> List[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            _run(api, full_dataset)
        return [
            r.getMessage()
            for r in caplog.records
            if re.match(r"report_(training|validation)_metrics\(", r.getMessage())
        ]

    theirs, ours = reported(det_pytorch), reported(dl_pytorch)
    assert len(theirs) == 4 and len(ours) == 4
    assert any("array(" in line for line in theirs)
    for mine, real in zip(ours, theirs):
        assert mine.split("metrics=")[0] == real.split("metrics=")[0]  # the same wording
        assert "array(" not in mine and "np." not in mine
        mine_metrics, real_metrics = _logged_metrics(mine), _logged_metrics(real)
        assert list(mine_metrics) == list(real_metrics)
        for name, value in real_metrics.items():
            expected = np.asarray(value, dtype=float)
            assert np.allclose(
                np.asarray(mine_metrics[name], dtype=float), expected, rtol=5e-4, atol=0
            ), (name, mine, real)
