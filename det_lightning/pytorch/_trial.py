"""``PyTorchTrial``: the user's model, data and steps. No loop logic lives here."""

import abc
from typing import Any, Dict, Union

import torch

from det_lightning._refused_attributes import RefusedAttribute
from det_lightning.pytorch._callback import PyTorchCallback
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._data import DataLoader, TorchData, data_length
from det_lightning.pytorch._reducer import Reducer


class PyTorchTrial(metaclass=abc.ABCMeta):
    """Subclass this and implement the abstract methods plus exactly one of ``evaluate_batch``
    and ``evaluate_full_dataset``.

    Args:
        context: the ``PyTorchTrialContext``; wrap models, optimizers and schedulers with it.
    """

    # Determined's class attributes: which context a trial gets, and (refused) which
    # controller runs it.
    trial_context_class = PyTorchTrialContext
    trial_controller_class = RefusedAttribute("PyTorchTrial")

    @abc.abstractmethod
    def __init__(self, context: "PyTorchTrialContext") -> None:
        pass

    @abc.abstractmethod
    def train_batch(
        self, batch: TorchData, epoch_idx: int, batch_idx: int
    ) -> Union[torch.Tensor, Dict[str, Any]]:
        """One training step: forward, ``context.backward(loss)``, ``context.step_optimizer(opt)``.

        Returns:
            the loss tensor, or a dict of metrics (averaged over each reporting period).
        """

    @abc.abstractmethod
    def build_training_data_loader(self) -> Union[DataLoader, torch.utils.data.DataLoader]:
        """The training data; a ``det_lightning.pytorch.DataLoader`` keeps it reproducible."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> Union[DataLoader, torch.utils.data.DataLoader]:
        """The validation data."""

    def build_callbacks(self) -> Dict[str, PyTorchCallback]:
        """Named ``PyTorchCallback`` objects; the names key their state in checkpoints."""
        return {}

    def evaluate_batch(self, batch: TorchData, batch_idx: int) -> Dict[str, Any]:
        """Metrics of one validation batch, reduced with ``evaluation_reducer()``."""
        raise NotImplementedError

    def evaluation_reducer(self) -> Union[Reducer, Dict[str, Reducer]]:
        """How ``evaluate_batch`` metrics combine: one ``Reducer`` or one per metric name."""
        return Reducer.AVG

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> Dict[str, Any]:
        """Metrics over the whole validation loader, computed on the chief only."""
        raise NotImplementedError

    def get_batch_length(self, batch: Any) -> int:
        """Records in ``batch``; override for batch types ``data_length`` cannot count."""
        return data_length(batch)


def is_overridden(trial: PyTorchTrial, name: str) -> bool:
    """Whether the trial's class defines ``name`` itself rather than inheriting our default."""
    return getattr(type(trial), name) is not getattr(PyTorchTrial, name)


def pre_012_api(trial_class: type) -> "list[str]":
    """What marks ``trial_class`` as written for Determined's PyTorchTrial API before 0.12:
    ``build_model()``, ``optimizer(model)``, a ``model`` parameter of ``train_batch`` or
    ``evaluate_batch``.

    >>> class Old(PyTorchTrial):
    ...     def build_model(self): ...
    ...     def optimizer(self, model): ...
    ...     def train_batch(self, batch, model, epoch_idx, batch_idx): ...
    >>> pre_012_api(Old)
    ['build_model()', 'optimizer(model)', 'train_batch(batch, model, ...)']
    """
    import inspect

    def takes_model(name: str) -> bool:
        method = getattr(trial_class, name, None)
        return callable(method) and "model" in inspect.signature(method).parameters

    found = ["build_model()"] if callable(getattr(trial_class, "build_model", None)) else []
    found += ["optimizer(model)"] if takes_model("optimizer") else []
    return found + [
        f"{name}(batch, model, ...)"
        for name in ("train_batch", "evaluate_batch")
        if takes_model(name)
    ]
