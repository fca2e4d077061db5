"""What runs between two ``train_batch`` calls (a validation, a report) leaves gradients, model
modes and weights as the real Determined 0.38.1 leaves them."""

from typing import Any, Dict, List

import pytest
import torch
from torch import nn

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import seed_everything


def make_trial(api: Any) -> Any:
    class IdentityTrial(api.PyTorchTrial):
        """``Linear(1, 1, bias=False)`` from weight 0 learning y = x on inputs 1.0, 1.1, ...,
        four a batch; a frozen submodule (``eval()`` in ``__init__``) records its mode."""

        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(
                nn.ModuleDict({"linear": nn.Linear(1, 1, bias=False), "frozen": nn.Dropout(0.5)})
            )
            with torch.no_grad():
                self.model["linear"].weight.zero_()
            self.model["frozen"].eval()
            params = self.model["linear"].parameters()
            self.opt = context.wrap_optimizer(torch.optim.SGD(params, lr=0.001))
            self.weights: List[float] = []
            self.modes: List[bool] = []

        def build_training_data_loader(self) -> Any:
            x = 1.0 + torch.arange(16, dtype=torch.float32).reshape(-1, 1) / 10
            return api.DataLoader(torch.utils.data.TensorDataset(x, x.clone()), batch_size=4)

        def build_validation_data_loader(self) -> Any:
            x = torch.ones(2, 1)
            return api.DataLoader(torch.utils.data.TensorDataset(x, x.clone()), batch_size=2)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            self.modes.append(self.model["frozen"].training)
            loss = nn.functional.mse_loss(self.model["linear"](x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            self.weights.append(self.model["linear"].weight.item())
            return loss

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            return {"validation_loss": nn.functional.mse_loss(self.model["linear"](x), y)}

    return IdentityTrial


def _run(api: Any, batches: int = 2) -> Any:
    seed_everything(0)
    with api.init(hparams={}, aggregation_frequency=2, enable_tensorboard_logging=False) as context:
        trial = make_trial(api)(context)
        api.Trainer(trial, context).fit(
            max_length=api.Batch(batches),
            validation_period=api.Batch(1),
            reporting_period=api.Batch(1),
        )
    return trial


def test_a_validation_inside_an_aggregation_window_keeps_the_gradients() -> None:
    trial = _run(dl_pytorch)
    # Batch 0 (inputs 1.0..1.3) and batch 1 (1.4..1.7) each give d(mse)/dw = -mean(2 x^2) at
    # w = 0: -2.67 and -4.83; the step averages them: w = 0.001 * (2.67 + 4.83) / 2.
    assert trial.weights == pytest.approx([0.0, 0.00375], abs=1e-7)


def test_training_mode_is_set_at_each_training_segment_as_determined_does() -> None:
    # Determined calls model.train() on every wrapped model when training (re)starts after a
    # boundary, undoing the eval() of __init__; Lightning alone would restore the old mode.
    assert _run(dl_pytorch).modes == [True, True]


@pytest.mark.interop
def test_gradients_modes_and_weights_match_real_determined() -> None:
    from determined import pytorch as det_pytorch

    theirs, ours = _run(det_pytorch, batches=6), _run(dl_pytorch, batches=6)
    assert ours.modes == theirs.modes
    assert ours.weights == theirs.weights
    assert theirs.weights[1] == pytest.approx(0.00375, abs=1e-7)


def _augmenting_run(api: Any) -> List[float]:
    """Dropout, a shuffled loader whose items draw from the global generator (augmentation),
    and a validation after every batch: every random draw around a validation, in order."""

    class Augmented(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int) -> Any:
            x = torch.full((4,), float(i)) + torch.rand(4)
            return x, x.sum(0, keepdim=True)

    class AugmentingTrial(api.PyTorchTrial):  # type: ignore[misc, name-defined]
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(
                nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
            )
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=1e-6))
            self.losses: List[float] = []

        def build_training_data_loader(self) -> Any:
            return api.DataLoader(Augmented(), batch_size=4, shuffle=True)

        def build_validation_data_loader(self) -> Any:
            return api.DataLoader(Augmented(), batch_size=8)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            self.losses.append(loss.item())
            return loss

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}

    seed_everything(0)
    with api.init(hparams={}, enable_tensorboard_logging=False) as context:
        trial = AugmentingTrial(context)
        api.Trainer(trial, context).fit(max_length=api.Batch(12), validation_period=api.Batch(1))
    return trial.losses


@pytest.mark.interop
def test_random_draws_around_validations_match_real_determined() -> None:
    from determined import pytorch as det_pytorch

    assert _augmenting_run(dl_pytorch) == _augmenting_run(det_pytorch)
