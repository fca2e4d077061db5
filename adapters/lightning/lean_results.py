"""The lean ``self.log``: Lightning's bookkeeping of a logged value, minus a device move that
finds everything already on the device.

Each ``LightningModule.log`` ends in ``_ResultCollection.log``, which calls
``self[key].to(value.device)`` on the metric the value accumulates into. ``_ResultMetric.to``
rebuilds the metric's whole ``__dict__`` through ``apply_to_collection``: every dict and
OrderedDict of the ``nn.Module`` and torchmetrics bookkeeping is copied, its metadata
dataclasses are deep-copied, and each tensor is moved with ``Tensor.to``, which hands back the
same tensor when it is already on that device. About 1,700 Python calls per ``self.log`` of one
scalar (``TrialHooks`` logs each reduced validation metric, ``TrainingReport`` each training
average), where Determined's reporting makes none.

``LeanResultMetric.to`` walks what ``apply_to_collection`` would reach (mappings, sequences,
dataclass fields) and, when it finds only tensors already on the device and no ``Metric``,
keeps the metric as it is: Lightning's ``to`` would only have replaced its containers with
equal copies (the same tensors, equal metadata; nothing reads their identity). Anything else
(a tensor elsewhere, a torchmetrics ``Metric`` logged as the value, a call with other
arguments, such as ``_ResultCollection.cpu()``'s) runs Lightning's ``to``. Follows
``_ResultMetric.to`` and ``_ResultCollection.log``, unchanged 2.4.0 to 2.6.6
(``versions.UNCHANGED``); ``tests/integration/test_lean_results.py`` checks the walk against
``apply_to_collection`` and the metrics against Lightning's own.
"""

import dataclasses
import inspect
import types
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Iterable

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.connectors.logger_connector.result import (
    _ResultCollection,
    _ResultMetric,
)
from torchmetrics import Metric

from det_lightning.adapters.lightning import versions

LEAN_RESULTS_ENV = "DET_LIGHTNING_LEAN_RESULTS"

# Types apply_to_collection hands back untouched, checked by type alone (the common ones in a
# _ResultMetric's __dict__; anything else goes through the isinstance checks below).
_LEAVES = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        str,
        set,
        torch.device,
        torch.dtype,
        types.FunctionType,
        types.MethodType,
        types.BuiltinFunctionType,
        inspect.Signature,
    }
)


def enabled() -> bool:
    """Whether the lean ``to`` may run: the installed Lightning has a row in
    ``versions.TABLE`` and neither ``DET_LIGHTNING_LEAN_RESULTS`` nor ``DET_LIGHTNING_LEAN``
    turns it off."""
    return versions.lean_allowed(LEAN_RESULTS_ENV)


def install(trainer: pl.Trainer) -> None:
    """Gives the results ``trainer.fit`` logs into (training and validation) the lean ``to``
    (when ``enabled()``)."""
    if not enabled():
        return
    epoch_loop = trainer.fit_loop.epoch_loop
    for results in (epoch_loop._results, epoch_loop.val_loop._results):
        if type(results) is _ResultCollection:
            results.__class__ = LeanResultCollection


def stays_on(data: Any, device: torch.device) -> bool:
    """Whether ``apply_to_collection(data, (Tensor, Metric), move_data_to_device, device)``
    reaches only tensors already on ``device`` and no ``Metric`` (so it moves nothing)."""
    kind = type(data)
    if kind in _LEAVES:
        return True
    if kind is torch.Tensor:
        return data.device == device
    items: Iterable[Any]
    if kind is dict or kind is OrderedDict:  # most of a metric's __dict__: checked by type
        items = data.values()
    elif isinstance(data, torch.Tensor):
        return data.device == device
    elif isinstance(data, Metric):
        return False
    elif isinstance(data, Mapping):
        items = data.values()
    elif isinstance(data, Sequence) and not isinstance(data, str):
        items = data  # namedtuples too
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        items = [getattr(data, field.name) for field in dataclasses.fields(data)]
    else:
        return True  # apply_to_collection returns it as it is
    for item in items:
        inner = type(item)
        if inner in _LEAVES:
            continue
        if inner is torch.Tensor:
            if item.device != device:
                return False
        elif (inner is dict or inner is OrderedDict) and not item:
            continue  # an empty table (most of nn.Module's hooks)
        elif not stays_on(item, device):
            return False
    return True


class LeanResultMetric(_ResultMetric):
    """Lightning's ``_ResultMetric`` whose ``to`` keeps a metric already on the device."""

    def to(self, *args: Any, **kwargs: Any) -> "_ResultMetric":  # type: ignore[override]
        """Follows ``_ResultMetric.to`` (unchanged 2.4.0 to 2.6.6): Lightning's, unless a
        ``to(device)`` would move nothing."""
        if (
            len(args) == 1
            and not kwargs
            and type(args[0]) is torch.device
            and self.is_tensor
            and stays_on(self.__dict__, args[0])
        ):
            return self
        return super().to(*args, **kwargs)


class LeanResultCollection(_ResultCollection):
    """Lightning's ``_ResultCollection`` whose new metrics are ``LeanResultMetric``s."""

    def __setitem__(self, key: str, value: Any) -> None:
        # _ResultCollection.log registers each new metric with self[key] = _ResultMetric(...)
        if type(value) is _ResultMetric:
            value.__class__ = LeanResultMetric
        super().__setitem__(key, value)
