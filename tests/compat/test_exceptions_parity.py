"""Misuse raises the exception class the real Determined 0.38.1 raises (ours derive from
``ValueError``/``RuntimeError``), so unmodified ``except det.errors.X`` code keeps working."""

from typing import Any, Dict

import pytest
import torch

from det_lightning import errors as dl_errors
from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import make_trials, seed_everything


def _cases(api: Any) -> Dict[str, Any]:
    base = make_trials(api)["MLPTrial"]

    class ReducerMissingAKey(base):  # type: ignore[misc, valid-type]
        def evaluation_reducer(self) -> Any:
            return {"not_a_metric": api.Reducer.AVG}

    class ReducerNotAReducer(base):  # type: ignore[misc, valid-type]
        def evaluation_reducer(self) -> Any:
            return {"validation_loss": "avg"}

    class BatchBeforeTraining(base):  # type: ignore[misc, valid-type]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.current_train_batch()

    class NoAutoZeroGrads(base):  # type: ignore[misc, valid-type]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt, auto_zero_grads=False)
            return loss

    return {
        "ReducerMissingAKey": (ReducerMissingAKey, "InvalidExperimentException", {}),
        "ReducerNotAReducer": (ReducerNotAReducer, "InvalidExperimentException", {}),
        "BatchBeforeTraining": (BatchBeforeTraining, "InternalException", {}),
        "NoAutoZeroGrads": (
            NoAutoZeroGrads,
            "InvalidExperimentException",
            {"aggregation_frequency": 2},
        ),
    }


CASES = list(_cases(dl_pytorch))


def _raised(api: Any, errors: Any, case: str) -> BaseException:
    trial_cls, name, init_kwargs = _cases(api)[case]
    seed_everything(0)
    with pytest.raises(getattr(errors, name)) as info:
        with api.init(
            hparams={"n": 16}, **init_kwargs, enable_tensorboard_logging=False
        ) as context:
            trial = trial_cls(context)
            api.Trainer(trial, context).fit(max_length=api.Batch(4), validation_period=api.Batch(2))
    return info.value


@pytest.mark.parametrize("case", CASES)
def test_misuse_raises_determineds_exception_class(case: str) -> None:
    raised = _raised(dl_pytorch, dl_errors, case)
    assert isinstance(raised, (ValueError, RuntimeError))  # also caught by `except Exception`


@pytest.mark.interop
@pytest.mark.parametrize("case", CASES)
def test_the_same_exception_class_as_real_determined(case: str) -> None:
    from determined import errors as det_errors
    from determined import pytorch as det_pytorch

    theirs = _raised(det_pytorch, det_errors, case)
    ours = _raised(dl_pytorch, dl_errors, case)
    assert type(ours).__name__ == type(theirs).__name__


def test_every_determined_error_class_has_a_det_lightning_namesake() -> None:
    """``except det.errors.CheckpointNotFound:`` and the like must not raise AttributeError;
    Determined's subclass relations hold (an ``InvalidModelException`` is an
    ``InvalidExperimentException``), and the constructors take Determined's arguments."""
    import inspect

    from determined import errors as real_errors

    real = {
        name: cls
        for name, cls in vars(real_errors).items()
        if inspect.isclass(cls) and issubclass(cls, BaseException)
    }
    assert len(real) > 10
    for name, cls in real.items():
        ours = getattr(dl_errors, name, None)
        assert inspect.isclass(ours) and issubclass(ours, Exception), name
        assert name in dl_errors.__all__, name
        for parent in cls.__mro__[1:]:
            if parent.__module__ == real_errors.__name__:
                assert issubclass(ours, getattr(dl_errors, parent.__name__)), (name, parent)
    config_error = dl_errors.InvalidConfigurationException({"a": 1}, "bad")
    assert str(config_error) == str(real_errors.InvalidConfigurationException({"a": 1}, "bad"))
    type_error = dl_errors.InvalidDataTypeException(int, "want a tensor")
    assert str(type_error) == str(real_errors.InvalidDataTypeException(int, "want a tensor"))
    assert isinstance(type_error, ValueError)
