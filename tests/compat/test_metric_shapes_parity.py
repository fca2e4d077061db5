"""Validation metrics that are not plain scalars (shape ``(1,)``, arrays of predictions, lists)
reach ``on_validation_end`` as the real Determined 0.38.1 gives them; only scalars are logged."""

from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from torch import nn

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.recording import RecordingLogger
from tests.fixtures.trials import regression_data, seed_everything


def make_trial(api: Any, full_dataset: bool) -> Any:
    class ShapesTrial(api.PyTorchTrial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(nn.Linear(8, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
            self.validations: List[Dict[str, Any]] = []

        def build_training_data_loader(self) -> Any:
            return api.DataLoader(regression_data(16), batch_size=4)

        def build_validation_data_loader(self) -> Any:
            return api.DataLoader(regression_data(12, seed=2), batch_size=4)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return loss

        def build_callbacks(self) -> Dict[str, Any]:
            trial = self

            class Keep(api.PyTorchCallback):
                def on_validation_end(self, metrics: Dict[str, Any]) -> None:
                    trial.validations.append(dict(metrics))

            return {"keep": Keep()}

    class PerBatch(ShapesTrial):
        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            preds = self.model(x)
            return {
                "validation_loss": nn.functional.mse_loss(preds, y),
                "one": torch.randint(1000, (1,)),  # shape (1,)
                "preds": preds,  # shape (4, 1)
                "pair": [1.0, float(y.sum())],
            }

    class FullDataset(ShapesTrial):
        def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
            preds = [self.model(x) for x, _ in data_loader]
            return {
                "validation_loss": 1.5,
                "one": torch.randint(1000, (1,)),
                "preds": torch.cat(preds),
                "per_batch": [p.mean() for p in preds],  # a list of tensors
                "names": ["a", "b"],
            }

    return FullDataset if full_dataset else PerBatch


def _run(api: Any, full_dataset: bool) -> Any:
    seed_everything(0)
    logger = RecordingLogger()
    with api.init(hparams={}, enable_tensorboard_logging=False) as context:
        trial = make_trial(api, full_dataset)(context)
        kwargs = {"logger": logger} if api is dl_pytorch else {}
        api.Trainer(trial, context, **kwargs).fit(
            max_length=api.Batch(4), validation_period=api.Batch(2)
        )
    return trial, logger


def test_a_shape_1_metric_reduces_to_a_scalar_and_non_scalars_pass_through() -> None:
    per_batch, _ = _run(dl_pytorch, full_dataset=False)
    assert np.shape(per_batch.validations[0]["one"]) == ()
    assert np.shape(per_batch.validations[0]["preds"]) == ()
    full, logger = _run(dl_pytorch, full_dataset=True)
    metrics = full.validations[0]
    assert np.shape(metrics["preds"]) == (12, 1)
    assert metrics["names"] == ["a", "b"]
    logged = {name for _, values in logger.logged for name in values}
    assert "validation_loss" in logged or "Determined/validation_loss" in logged
    assert not any(n.endswith(("preds", "names", "per_batch", "one")) for n in logged)


def _same(ours: Any, theirs: Any) -> None:
    assert type(ours) is type(theirs)
    if isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs)
        for mine, real in zip(ours, theirs):
            _same(mine, real)
        return
    if isinstance(theirs, torch.Tensor):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        return
    assert np.shape(ours) == np.shape(theirs)
    assert np.asarray(ours).dtype == np.asarray(theirs).dtype
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.interop
@pytest.mark.parametrize("full_dataset", [False, True])
def test_validation_metric_shapes_match_real_determined(full_dataset: bool) -> None:
    from determined import pytorch as det_pytorch

    theirs, _ = _run(det_pytorch, full_dataset)
    ours, _ = _run(dl_pytorch, full_dataset)
    assert len(ours.validations) == len(theirs.validations) == 2
    for mine, real in zip(ours.validations, theirs.validations):
        assert list(mine) == list(real)  # names in the same order
        for name in real:
            _same(mine[name], real[name])
