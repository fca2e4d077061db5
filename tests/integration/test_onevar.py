"""The one-weight oracle: y = 2x, w starts at 0, plain SGD; the weight has a closed form."""

import pytest
import torch

from det_lightning import pytorch
from tests.fixtures.run import run_trial


def closed_form_weight(lr: float, batches: int, batch_size: int) -> float:
    """w after ``batches`` SGD steps on mean((w x - 2x)^2) over the fixture's batches."""
    xs = [i / 16 for i in range(1, 17)]
    w = 0.0
    for step in range(batches):
        start = (step * batch_size) % 16
        batch = xs[start : start + batch_size]
        grad = sum(2 * (w * x - 2 * x) * x for x in batch) / len(batch)
        w -= lr * grad
    return w


@pytest.mark.parametrize("batches,batch_size", [(1, 4), (7, 4), (12, 8)])
def test_weight_after_n_sgd_steps_has_the_closed_form(batches: int, batch_size: int) -> None:
    trial, _ = run_trial(
        pytorch,
        "OneVarTrial",
        {"lr": 0.5, "batch_size": batch_size},
        max_length=pytorch.Batch(batches),
    )
    weight = trial.model.weight.item()
    assert weight == pytest.approx(closed_form_weight(0.5, batches, batch_size), rel=1e-6)
    assert weight != pytest.approx(closed_form_weight(0.5, batches + 1, batch_size), rel=1e-6)


def test_aggregation_frequency_equals_a_bigger_batch() -> None:
    """Four accumulated batches of 2 (gradients averaged) equal one batch of 8."""
    accumulated, _ = run_trial(
        pytorch,
        "OneVarTrial",
        {"lr": 0.5, "batch_size": 2},
        init_kwargs={"aggregation_frequency": 4},
        max_length=pytorch.Batch(16),
    )
    big, _ = run_trial(
        pytorch, "OneVarTrial", {"lr": 0.5, "batch_size": 8}, max_length=pytorch.Batch(4)
    )
    assert accumulated.model.weight.item() == pytest.approx(big.model.weight.item(), rel=1e-6)
    assert big.model.weight.item() == pytest.approx(closed_form_weight(0.5, 4, 8), rel=1e-6)
    assert torch.is_tensor(accumulated.model.weight)
