"""A NaN or infinite ``loss``: training goes on with one warning per reporting period (as in
Determined and Lightning); ``Trainer(stop_on_nonfinite_loss=True)`` or
``DET_LIGHTNING_STOP_ON_NONFINITE_LOSS=1`` stops it."""

import logging
import pathlib
from typing import Any, Dict, List, Optional

import pytest
import torch

from det_lightning import errors
from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import make_trials, seed_everything

ENV = "DET_LIGHTNING_STOP_ON_NONFINITE_LOSS"


def _trial_class(api: Any) -> Any:
    class LossNotFinite(make_trials(api)["MLPTrial"]):  # type: ignore[misc]
        """Reports a NaN loss at batches 2 and 3 and an infinite one at batch 5 (the model
        trains on the real loss)."""

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            out = super().train_batch(batch, epoch_idx, batch_idx)
            value = {2: float("nan"), 3: float("nan"), 5: float("inf")}.get(batch_idx)
            return {"loss": out["loss"] if value is None else torch.tensor(value)}

    return LossNotFinite


def _fit(api: Any, tmp_path: pathlib.Path, stop: Optional[bool] = None) -> Any:
    seed_everything(0)
    with api.init(hparams={"n": 64, "batch_size": 8}, enable_tensorboard_logging=False) as context:
        trial = _trial_class(api)(context)
        kwargs: Dict[str, Any] = {}
        if api is dl_pytorch:
            kwargs = {"logger": False, "checkpoint_dir": str(tmp_path / "ckpt")}
            if stop is not None:
                kwargs["stop_on_nonfinite_loss"] = stop
        api.Trainer(trial, context, **kwargs).fit(
            max_length=api.Batch(8), reporting_period=api.Batch(4)
        )
    return trial


def _warnings(caplog: pytest.LogCaptureFixture) -> List[str]:
    return [r.getMessage() for r in caplog.records if "Training metric 'loss' is" in r.getMessage()]


def test_by_default_training_goes_on_with_one_warning_per_period(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with caplog.at_level(logging.WARNING):
        trial = _fit(dl_pytorch, tmp_path)
    assert len(trial.seen) == 8  # every batch trained
    warnings = _warnings(caplog)
    assert len(warnings) == 2  # batches 0-3, then 4-7
    assert warnings[0].startswith(
        "Training metric 'loss' is nan at batch 2 (0-based), and at 1 more batch(es) of this "
        "reporting period."
    )
    assert "Trainer(stop_on_nonfinite_loss=True)" in warnings[0] and ENV in warnings[0]
    assert warnings[1].startswith("Training metric 'loss' is inf at batch 5 (0-based).")


def test_the_trainer_keyword_stops_at_the_period(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "0")  # the keyword wins over the environment
    with pytest.raises(errors.NonFiniteLossError, match=r"'loss' is nan at batch 2 \(0-based\)"):
        _fit(dl_pytorch, tmp_path, stop=True)


@pytest.mark.parametrize("value", ["1", "true"])
def test_the_environment_variable_stops(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(errors.NonFiniteLossError, match=r"'loss' is nan at batch 2"):
        _fit(dl_pytorch, tmp_path)


def test_a_bad_setting_names_the_fix(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "sometimes")
    with pytest.raises(ValueError, match=f"{ENV}='sometimes': expected 1"):
        _fit(dl_pytorch, tmp_path)
    monkeypatch.delenv(ENV)
    with pytest.raises(TypeError, match=r"Trainer\(stop_on_nonfinite_loss='yes'\)"):
        _fit(dl_pytorch, tmp_path, stop="yes")  # type: ignore[arg-type]


@pytest.mark.interop
def test_training_goes_on_as_in_real_determined(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from determined import pytorch as det_pytorch

    monkeypatch.delenv(ENV, raising=False)
    theirs, ours = _fit(det_pytorch, tmp_path), _fit(dl_pytorch, tmp_path)
    assert ours.seen == theirs.seen
    assert [str(v) for v in ours.recorder.batch_losses] == [
        str(v) for v in theirs.recorder.batch_losses
    ]
