"""``PyTorchCallback`` hooks written with an older Determined signature are called the way the
real Determined 0.38.1 calls them."""

import logging
from typing import Any, Dict, List

import pytest

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import make_trials, seed_everything


def _run(api: Any) -> List[Any]:
    calls: List[Any] = []

    class LegacyEpochStart(api.PyTorchCallback):
        def on_training_epoch_start(self) -> None:  # type: ignore[override]  # before 0.17.8
            calls.append("epoch_start")

        def on_training_epoch_end(self, epoch_idx: int) -> None:
            calls.append(("epoch_end", epoch_idx))

    class Trial(make_trials(api)["MLPTrial"]):  # type: ignore[misc]
        def build_callbacks(self) -> Dict[str, Any]:
            return {"legacy": LegacyEpochStart(), "other": LegacyEpochStart()}

    seed_everything(0)
    with api.init(hparams={"n": 16, "batch_size": 8}, enable_tensorboard_logging=False) as context:
        trial = Trial(context)
        api.Trainer(trial, context).fit(max_length=api.Epoch(3))
    return calls


def test_on_training_epoch_start_without_epoch_idx_is_called_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        calls = _run(dl_pytorch)
    assert calls == [
        "epoch_start",
        "epoch_start",
        ("epoch_end", 0),
        ("epoch_end", 0),
        "epoch_start",
        "epoch_start",
        ("epoch_end", 1),
        ("epoch_end", 1),
        "epoch_start",
        "epoch_start",
        ("epoch_end", 2),
        ("epoch_end", 2),
    ]
    deprecations = [r for r in caplog.records if "without parameters is deprecated" in r.message]
    assert len(deprecations) == 2  # once per callback, not once per epoch
    assert "LegacyEpochStart.on_training_epoch_start()" in deprecations[0].message


@pytest.mark.interop
def test_legacy_hooks_are_called_as_real_determined_calls_them() -> None:
    from determined import pytorch as det_pytorch

    assert _run(dl_pytorch) == _run(det_pytorch)
