"""The context's optimizer handling against a plain PyTorch loop doing the same math."""

from typing import Any, Dict, List

import pytest
import torch
from torch import nn

from det_lightning import pytorch
from tests.fixtures.trials import regression_data, seed_everything


class TwoModelTrial(pytorch.PyTorchTrial):
    """Two models, two optimizers; the step order and clipping come from hparams."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        torch.manual_seed(0)
        self.a = context.wrap_model(nn.Linear(8, 4))
        self.b = context.wrap_model(nn.Linear(4, 1))
        self.opt_a = context.wrap_optimizer(torch.optim.SGD(self.a.parameters(), lr=0.1))
        self.opt_b = context.wrap_optimizer(torch.optim.Adam(self.b.parameters(), lr=0.01))
        self.clip = context.get_hparam("clip")
        self.clipped: List[float] = []

    def build_training_data_loader(self) -> Any:
        return pytorch.DataLoader(regression_data(32), batch_size=8)

    def build_validation_data_loader(self) -> Any:
        return pytorch.DataLoader(regression_data(16, seed=1), batch_size=8)

    def _clip(self, params: Any) -> None:
        norm = torch.nn.utils.clip_grad_norm_(params, self.clip)
        self.clipped.append(float(norm))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = nn.functional.mse_loss(self.b(self.a(x)), y)
        self.context.backward(loss)
        order = (
            [self.opt_b, self.opt_a]
            if self.context.get_hparam("b_first")
            else [self.opt_a, self.opt_b]
        )
        for opt in order:
            self.context.step_optimizer(opt, clip_grads=self._clip if self.clip else None)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.b(self.a(x)), y)}


def reference_loop(clip: float, b_first: bool, batches: int) -> List[torch.Tensor]:
    torch.manual_seed(0)
    a, b = nn.Linear(8, 4), nn.Linear(4, 1)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.Adam(b.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(regression_data(32), batch_size=8)
    done = 0
    while done < batches:
        for x, y in loader:
            loss = nn.functional.mse_loss(b(a(x)), y)
            loss.backward()
            for opt, params in [(opt_b, b), (opt_a, a)] if b_first else [(opt_a, a), (opt_b, b)]:
                if clip:
                    torch.nn.utils.clip_grad_norm_(list(params.parameters()), clip)
                opt.step()
                opt.zero_grad()
            done += 1
            if done == batches:
                break
    return [p.detach() for p in [*a.parameters(), *b.parameters()]]


@pytest.mark.parametrize("clip,b_first", [(0.0, False), (0.0, True), (0.05, False), (0.05, True)])
def test_two_models_two_optimizers_and_clipping_match_a_plain_loop(
    clip: float, b_first: bool
) -> None:
    seed_everything(0)
    with pytorch.init(hparams={"clip": clip, "b_first": b_first}) as context:
        trial = TwoModelTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(10))
    ours = [p.detach() for p in [*trial.a.parameters(), *trial.b.parameters()]]
    for mine, expected in zip(ours, reference_loop(clip, b_first, 10)):
        assert torch.allclose(mine, expected, atol=1e-6, rtol=0)
    if clip:
        assert len(trial.clipped) == 20 and max(trial.clipped) > clip  # clipping was needed


def test_clipping_changes_the_result() -> None:
    """Guards the test above: clipped and unclipped training really differ."""
    clipped, unclipped = reference_loop(0.05, False, 10), reference_loop(0.0, False, 10)
    assert not torch.allclose(clipped[0], unclipped[0], atol=1e-4)
