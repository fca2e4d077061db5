"""A trial written for Determined's PyTorchTrial API before 0.12 (``build_model``,
``optimizer(model)``, ``train_batch(batch, model, ...)``): Determined 0.38.1 refuses it with
``InvalidExperimentException`` ("Must have at least one model"); det_lightning raises the same
class, saying the trial predates 0.12 and what to change."""

from typing import Any

import pytest
import torch
from determined import errors as det_errors
from determined import pytorch as det_pytorch

from det_lightning import errors as dl_errors
from det_lightning import pytorch as dl_pytorch

pytestmark = pytest.mark.interop


def old_trial(api: Any) -> type:
    class OldTrial(api.PyTorchTrial):  # type: ignore[misc, valid-type]
        def __init__(self, context: Any) -> None:
            self.context = context

        def build_model(self) -> torch.nn.Module:
            return torch.nn.Linear(1, 1)

        def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
            return torch.optim.SGD(model.parameters(), lr=0.1)

        def build_training_data_loader(self) -> Any:
            x = torch.ones(4, 1)
            return api.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=2)

        def build_validation_data_loader(self) -> Any:
            return self.build_training_data_loader()

        def train_batch(self, batch: Any, model: Any, epoch_idx: int, batch_idx: int) -> Any:
            return {}

        def evaluate_batch(self, batch: Any, model: Any) -> Any:
            return {}

    return OldTrial


def _raised(api: Any, errors: Any) -> BaseException:
    with pytest.raises(errors.InvalidExperimentException) as info:
        with api.init(hparams={}, enable_tensorboard_logging=False) as context:
            api.Trainer(old_trial(api)(context), context).fit(max_length=api.Batch(2))
    return info.value


def test_refused_with_determineds_class_and_a_hint(isolated_run: Any) -> None:
    theirs = _raised(det_pytorch, det_errors)
    ours = _raised(dl_pytorch, dl_errors)
    assert "Must have at least one model" in str(theirs)
    message = str(ours)
    for fragment in (
        "OldTrial",
        "before 0.12",
        "build_model()",
        "optimizer(model)",
        "train_batch(batch, model, ...)",
        "context.wrap_model",
        "train_batch(self, batch, epoch_idx, batch_idx)",
    ):
        assert fragment in message, fragment
