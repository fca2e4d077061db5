"""Random draws in ``PyTorchCallback`` hooks happen where Determined 0.38.1 makes them.

Determined calls ``on_validation_start`` and ``on_validation_epoch_start`` before it builds the
validation iterator (which draws a seed from the global torch generator), ``on_training_start``
after the training iterator exists, and each ``on_training_epoch_start`` after the pass's first
batch is drawn. A callback that draws random numbers in every hook (a public project's callback
sampled a random subset there), a shuffled validation loader and a noisy evaluation: the draws
each hook gets, the training losses and the validation metrics must be bit-identical.
"""

from typing import Any, Dict, List, Tuple

import pytest
import torch
from determined import pytorch as det_pytorch

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import make_trials, regression_data, seed_everything

pytestmark = pytest.mark.interop

HOOKS = (
    "on_trial_startup",
    "on_training_start",
    "on_training_epoch_start",
    "on_training_epoch_end",
    "on_training_workload_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_checkpoint_save_start",
    "on_checkpoint_write_end",
)


def make_trial(api: Any) -> type:
    base = make_trials(api)["MLPTrial"]

    class Drawing(api.PyTorchCallback):
        """Draws from the global torch generator in every hook and records what it got."""

        def __init__(self) -> None:
            self.draws: List[Tuple[str, List[float]]] = []

    def drawing_hook(name: str) -> Any:
        def hook(self: Any, *args: Any, **kwargs: Any) -> None:
            self.draws.append((name, torch.rand(2).tolist()))

        return hook

    for name in HOOKS:
        setattr(Drawing, name, drawing_hook(name))

    class DrawingTrial(base):  # type: ignore[misc, valid-type]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.drawing = Drawing()

        def build_validation_data_loader(self) -> Any:
            return api.DataLoader(regression_data(32, seed=1), batch_size=8, shuffle=True)

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            noisy = x + 0.1 * torch.randn_like(x)  # test-time augmentation, from the generator
            return {
                "validation_loss": torch.nn.functional.mse_loss(self.model(noisy), y),
                "first": x[0, 0],
            }

        def build_callbacks(self) -> Dict[str, Any]:
            return {"recorder": self.recorder, "drawing": self.drawing}

    return DrawingTrial


def _run(api: Any, **fit: Any) -> Any:
    seed_everything(4)
    with api.init(
        hparams={"dropout": 0.3, "batch_size": 8, "n": 40}, enable_tensorboard_logging=False
    ) as context:
        trial = make_trial(api)(context)
        api.Trainer(trial, context).fit(**fit)
    return trial, torch.rand(3).tolist()


SCHEDULES = {
    "validate-mid-epoch-and-at-epoch-ends": dict(
        max_length=("Epoch", 3),
        validation_period=("Batch", 3),
        checkpoint_period=("Epoch", 1),
        checkpoint_policy="all",  # "best" is honoured here, Determined falls back to "all"
        reporting_period=("Batch", 2),
    ),
    "step-zero-validation": dict(
        max_length=("Batch", 7),
        validation_period=("Epoch", 1),
        step_zero_validation=True,
    ),
}


def _fit_kwargs(api: Any, schedule: Dict[str, Any]) -> Dict[str, Any]:
    return {k: getattr(api, v[0])(v[1]) if isinstance(v, tuple) else v for k, v in schedule.items()}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_hook_draws_and_metrics_match_real_determined(name: str, isolated_run: Any) -> None:
    theirs, after_theirs = _run(det_pytorch, **_fit_kwargs(det_pytorch, SCHEDULES[name]))
    ours, after_ours = _run(dl_pytorch, **_fit_kwargs(dl_pytorch, SCHEDULES[name]))

    assert [h for h, _ in ours.drawing.draws] == [h for h, _ in theirs.drawing.draws]
    assert ours.drawing.draws == theirs.drawing.draws
    assert ours.recorder.validations == theirs.recorder.validations
    assert ours.recorder.batch_losses == theirs.recorder.batch_losses
    assert after_ours == after_theirs
