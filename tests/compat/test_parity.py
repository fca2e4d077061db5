"""The same trial under the real Determined 0.38.1 and under det_lightning: same numbers.

Both runs seed ``random``, numpy and torch identically before ``init()``. The trial uses dropout
and a shuffled loader, so every random draw (iterator creation, each shuffled pass, each
validation pass, dropout) must happen at the same point in both for the numbers to agree.
They agree bit for bit: nothing here needs a tolerance.
"""

from typing import Any, Dict

import pytest
import torch
from determined import pytorch as det_pytorch

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.run import run_trial

pytestmark = pytest.mark.interop

SCHEDULES: Dict[str, Dict[str, Any]] = {
    "epochs-with-batch-validation": dict(
        max_length="Epoch(3)", validation_period="Batch(10)", reporting_period="Batch(5)"
    ),
    "batches-across-epochs": dict(
        max_length="Batch(21)",
        validation_period="Epoch(1)",
        reporting_period="Batch(4)",
        checkpoint_period="Batch(7)",
    ),
    "container-periods": dict(
        max_length="Batch(20)",
        validation_period="Batch([3, 11, 17])",
        reporting_period="Batch(100)",
    ),
}


def _fit_kwargs(api: Any, schedule: Dict[str, str]) -> Dict[str, Any]:
    return {k: eval(v, {"Batch": api.Batch, "Epoch": api.Epoch}) for k, v in schedule.items()}


def _run(api: Any, schedule: Dict[str, str], hparams: Dict[str, Any]) -> Any:
    trial, _ = run_trial(api, "MLPTrial", hparams, seed=11, **_fit_kwargs(api, schedule))
    return trial


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_losses_weights_and_validation_match_real_determined(name: str) -> None:
    schedule = SCHEDULES[name]
    hparams = {"lr": 0.05, "dropout": 0.3, "batch_size": 8}
    theirs = _run(det_pytorch, schedule, hparams)
    ours = _run(dl_pytorch, schedule, hparams)

    assert len(ours.recorder.batch_losses) == len(theirs.recorder.batch_losses) > 0
    assert ours.recorder.batch_losses == theirs.recorder.batch_losses
    assert ours.recorder.validations == theirs.recorder.validations
    for mine, real in zip(ours.model.parameters(), theirs.model.parameters()):
        assert torch.equal(mine, real)


def test_global_generator_ends_in_the_same_state() -> None:
    """Every draw happened in both: the next random number after training is the same."""
    schedule = SCHEDULES["epochs-with-batch-validation"]
    _run(det_pytorch, schedule, {})
    after_theirs = torch.rand(4)
    _run(dl_pytorch, schedule, {})
    after_ours = torch.rand(4)
    assert torch.equal(after_ours, after_theirs)


def test_unshuffled_loader_without_dropout_matches() -> None:
    schedule = SCHEDULES["batches-across-epochs"]
    hparams = {"shuffle": False, "dropout": 0.0}
    theirs = _run(det_pytorch, schedule, hparams)
    ours = _run(dl_pytorch, schedule, hparams)
    assert ours.recorder.batch_losses == theirs.recorder.batch_losses
