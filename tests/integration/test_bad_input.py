"""What a trial can get wrong, and the message it gets: one row per mistake.

Messages keep Determined's wording where users know it ("Could not find name ...", "Please
define exactly one of ...", "max_length must be defined ...", "validation_loader is empty",
"Was not able to move data item ...") and say where the problem is and how to fix it.
"""

import logging
import re
from typing import Any, Dict, Optional, Type

import pytest
import torch
from torch import nn

from det_lightning import errors, pytorch
from tests.fixtures.trials import make_trials, regression_data, seed_everything

HPARAMS = {"n": 32, "batch_size": 8}


class Trial(make_trials(pytorch)["MLPTrial"]):  # type: ignore[misc]
    """The fixture MLP, without its recorder (which expects well-formed metrics)."""

    def build_callbacks(self) -> Dict[str, Any]:
        return {}


def empty_dataset() -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.zeros(0, 8), torch.zeros(0, 1))


class NoReproChecks(Trial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        context.experimental.disable_dataset_reproducibility_checks()


# ----- data loaders ----------------------------------------------------------------------------
class TrainingLoaderNone(Trial):
    def build_training_data_loader(self) -> Any:
        return None


class TrainingLoaderInt(Trial):
    def build_training_data_loader(self) -> Any:
        return 5


class TrainingLoaderIntUnchecked(NoReproChecks):
    def build_training_data_loader(self) -> Any:
        return 5


class TrainingLoaderEmpty(Trial):
    def build_training_data_loader(self) -> Any:
        return pytorch.DataLoader(empty_dataset(), batch_size=4)


class TrainingLoaderEmptyTorch(NoReproChecks):
    def build_training_data_loader(self) -> Any:
        return torch.utils.data.DataLoader(empty_dataset(), batch_size=4)


class ValidationLoaderEmpty(Trial):
    def build_validation_data_loader(self) -> Any:
        return pytorch.DataLoader(empty_dataset(), batch_size=4)


class ValidationLoaderNone(Trial):
    def build_validation_data_loader(self) -> Any:
        return None


class Unmovable:
    def to(self, device: Any) -> "Unmovable":
        raise RuntimeError("this object stays where it is")


class BatchUnmovable(Trial):
    def build_training_data_loader(self) -> Any:
        return pytorch.DataLoader(
            regression_data(8), batch_size=2, collate_fn=lambda b: Unmovable()
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        raise AssertionError("never reached: the batch cannot be moved")


class BatchOfUnknownType(Trial):
    def build_training_data_loader(self) -> Any:
        return pytorch.DataLoader(regression_data(8), batch_size=2, collate_fn=lambda b: object())

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = regression_data(8)[:]
        return super().train_batch((x, y), epoch_idx, batch_idx)


# ----- what the trial returns ------------------------------------------------------------------
class TrainMetricNotJson(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        return {**super().train_batch(batch, epoch_idx, batch_idx), "obj": object()}


class TrainMetricNameNotStr(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        return {1: super().train_batch(batch, epoch_idx, batch_idx)["loss"]}


class TrainBatchReturnsFloat(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        super().train_batch(batch, epoch_idx, batch_idx)
        return 1.5


class TrainMetricIsText(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        return {**super().train_batch(batch, epoch_idx, batch_idx), "phase": "warmup"}


class EvalMetricNotNumeric(Trial):
    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        return {**super().evaluate_batch(batch), "obj": object()}


class EvalSearcherMetricNotScalar(Trial):
    # Per-batch arrays reduce to a scalar (as in Determined); a full-dataset array stays one.
    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch

    def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
        return {"validation_loss": torch.ones(3)}


class EvalReturnsList(Trial):
    def evaluate_batch(self, batch: Any) -> Any:
        return [1.0]


class EvalKeysChange(Trial):
    calls = 0

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        type(self).calls += 1
        return {"validation_loss" if self.calls == 1 else "other": torch.tensor(1.0)}


class FullDatasetReturnsList(Trial):
    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch

    def evaluate_full_dataset(self, data_loader: Any) -> Any:
        return [1.0]


class BothEvaluations(Trial):
    def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
        return {}


class NeitherEvaluation(Trial):
    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch


# ----- context misuse --------------------------------------------------------------------------
class MissingHparam(Trial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        context.get_hparam("learning_rate")


class WrapModelLate(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.context.wrap_model(nn.Linear(1, 1))


class WrapOptimizerLate(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))


class StepBeforeBackward(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.context.step_optimizer(self.opt)


class StepUnwrappedOptimizer(Trial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        self.context.backward(nn.functional.mse_loss(self.model(x), y))
        self.context.step_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))


# ----- the table -------------------------------------------------------------------------------
def row(
    case_id: str, trial: Type, error: Optional[Type[BaseException]], message: str, **fit: Any
) -> Any:
    return pytest.param(trial, error, message, fit, id=case_id)


CASES = [
    row(
        "training loader None",
        TrainingLoaderNone,
        TypeError,
        "build_training_data_loader() returned None: it must return a "
        "det_lightning.pytorch.DataLoader",
    ),
    row(
        "training loader not a DataLoader",
        TrainingLoaderInt,
        RuntimeError,
        "build_training_data_loader() returned an instance of int, which is not a subclass of "
        "det.pytorch.DataLoader",
    ),
    row(
        "training loader not iterable",
        TrainingLoaderIntUnchecked,
        TypeError,
        "build_training_data_loader() returned an instance of int, which is not iterable.",
    ),
    row(
        "training loader empty",
        TrainingLoaderEmpty,
        ValueError,
        "The training data loader yields no batches (its dataset is empty",
    ),
    row(
        "plain training loader empty",
        TrainingLoaderEmptyTorch,
        ValueError,
        "The training data loader yields no batches: build_training_data_loader() returned an "
        "empty DataLoader.",
    ),
    row(
        "validation loader empty",
        ValidationLoaderEmpty,
        RuntimeError,
        "validation_loader is empty: build_validation_data_loader() yields no batches.",
    ),
    row(
        "validation loader None",
        ValidationLoaderNone,
        TypeError,
        "build_validation_data_loader() returned None",
    ),
    row(
        "batch cannot be moved",
        BatchUnmovable,
        RuntimeError,
        "Was not able to move data item of type 'Unmovable' to device cpu: its .to() raised "
        "RuntimeError: this object stays where it is.",
    ),
    row(
        "batch of an unknown type (a warning)",
        BatchOfUnknownType,
        None,
        "Was not able to move data item of type 'object' to device.",
    ),
    row(
        "training metric not JSON",
        TrainMetricNotJson,
        TypeError,
        "Metric 'obj' has a value of type object that cannot be reported",
        reporting=2,
    ),
    row(
        "training metric name not str",
        TrainMetricNameNotStr,
        TypeError,
        "train_batch() returned a metric named 1; names must be str.",
    ),
    row(
        "train_batch returns a float",
        TrainBatchReturnsFloat,
        TypeError,
        "train_batch() returned a float at batch 0; it must return the loss tensor or a dict",
    ),
    row(
        "training metric is a string",
        TrainMetricIsText,
        TypeError,
        "train_batch() returned metric 'phase' = 'warmup' at batch 0: training metrics are "
        "averaged over each reporting period, so each must be a number, a tensor or a numpy "
        "array",
    ),
    row(
        "validation metric not numeric",
        EvalMetricNotNumeric,
        TypeError,
        "evaluate_batch() returned metric 'obj' of type object: metrics must be tensors",
    ),
    row(
        "searcher metric not scalar",
        EvalSearcherMetricNotScalar,
        RuntimeError,
        "Searcher validation metric 'validation_loss' returned a non-scalar value",
    ),
    row(
        "evaluate_batch returns a list",
        EvalReturnsList,
        TypeError,
        "evaluate_batch() must return a dictionary of string names to Tensor metrics; got list",
    ),
    row(
        "validation metric names change",
        EvalKeysChange,
        ValueError,
        "Validation metric names must match across all batches of data",
    ),
    row(
        "evaluate_full_dataset returns a list",
        FullDatasetReturnsList,
        TypeError,
        "evaluate_full_dataset() must return a dict of metric names to values, got list.",
    ),
    row(
        "both evaluations",
        BothEvaluations,
        errors.InvalidExperimentException,
        "Please define exactly one of: `evaluate_batch()` or `evaluate_full_dataset()`.",
    ),
    row(
        "neither evaluation",
        NeitherEvaluation,
        errors.InvalidExperimentException,
        "Please define exactly one of: `evaluate_batch()` or `evaluate_full_dataset()`.",
    ),
    row(
        "hparam missing",
        MissingHparam,
        ValueError,
        "Could not find name 'learning_rate' in experiment hyperparameters. Available: "
        "['batch_size', 'n'].",
    ),
    row(
        "wrap_model after training started",
        WrapModelLate,
        errors.InvalidExperimentException,
        "wrap_model() was called after training started.",
    ),
    row(
        "wrap_optimizer after training started",
        WrapOptimizerLate,
        errors.InvalidExperimentException,
        "wrap_optimizer() was called after training started.",
    ),
    row(
        "step_optimizer before backward",
        StepBeforeBackward,
        errors.InvalidExperimentException,
        "step_optimizer() was called before backward()",
    ),
    row(
        "optimizer never wrapped",
        StepUnwrappedOptimizer,
        errors.InvalidExperimentException,
        "step_optimizer() got an optimizer (SGD) that was never wrapped.",
    ),
    row(
        "no max_length",
        Trial,
        ValueError,
        "max_length must be defined in local training mode",
        max_length=None,
    ),
    row(
        "max_length an int",
        Trial,
        TypeError,
        "max_length must either be a det.pytorch.Batch(int) or det.pytorch.Epoch(int) type.",
        max_length=10,
    ),
    row(
        "validation_period an int",
        Trial,
        TypeError,
        "fit(validation_period=5) is not a valid period. Expected det.pytorch.Batch(...) or "
        "det.pytorch.Epoch(...)",
        validation_period=5,
    ),
    row(
        "checkpoint_period a string",
        Trial,
        TypeError,
        "fit(checkpoint_period='5') is not a valid period.",
        checkpoint_period="5",
    ),
]


def fit_args(fit: Dict[str, Any]) -> Dict[str, Any]:
    args: Dict[str, Any] = {"max_length": pytorch.Batch(8), "validation_period": pytorch.Batch(4)}
    if "reporting" in fit:
        args["reporting_period"] = pytorch.Batch(fit.pop("reporting"))
    args.update(fit)
    return args


@pytest.mark.parametrize("trial_cls,error,message,fit", CASES)
def test_bad_input_gets_a_clear_message(
    trial_cls: Type,
    error: Optional[Type[BaseException]],
    message: str,
    fit: Dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_everything(0)
    with pytorch.init(hparams=dict(HPARAMS), accelerator="cpu") as context:
        if error is None:
            trial = trial_cls(context)
            pytorch.Trainer(trial, context, logger=False).fit(**fit_args(dict(fit)))
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert message in warnings
            return
        with pytest.raises(error, match=re.escape(message)):
            trial = trial_cls(context)
            pytorch.Trainer(trial, context, logger=False).fit(**fit_args(dict(fit)))
