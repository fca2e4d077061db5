"""Metrics: checking what the trial returns, averaging, reducing across ranks, and reporting.

Per batch we only keep what ``train_batch`` returned (detached); conversion to numbers happens
once per reporting period, so a GPU run syncs once per period rather than once per batch.
Numbers follow Determined: a training metric's period value is ``np.mean`` of the per-batch
float32 values; validation metrics go through the trial's reducers, which reduce every element
of a per-batch value to one number, as Determined's do. Reports are logged in Determined's words
(``report_training_metrics(steps_completed=..., metrics={...})``) with the numbers short
(``format_metrics``); only numerical scalars go to Lightning's loggers.
"""

import json
import logging
import math
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np
import torch

from det_lightning import errors
from det_lightning._switch import switch
from det_lightning.core import DistributedContext
from det_lightning.pytorch._checkpoint_policy import is_numerical_scalar
from det_lightning.pytorch._reducer import prepare_reducers, simple_reduce

logger = logging.getLogger("det_lightning.pytorch")
# The metric lines Determined's core logs (determined.core), under the same name.
core_logger = logging.getLogger("det_lightning.core")


def check_training_output(output: Any, batch_idx: int) -> Dict[str, Any]:
    """``train_batch``'s result as a dict of detached values, or an error that names the fix."""
    if isinstance(output, torch.Tensor):
        return {"loss": output.detach()}
    if not isinstance(output, dict):
        raise TypeError(
            f"train_batch() returned a {type(output).__name__} at batch {batch_idx}; it must "
            "return the loss tensor or a dict of metric names to values, e.g. "
            "`return {'loss': loss}`."
        )
    checked = {}
    for name, value in output.items():
        if not isinstance(name, str):
            raise TypeError(f"train_batch() returned a metric named {name!r}; names must be str.")
        if isinstance(value, (str, bytes)):
            # Determined averages it to None without a word; the chart shows a gap, the
            # summary a blank, and nobody learns why.
            raise TypeError(
                f"train_batch() returned metric {name!r} = {value!r} at batch {batch_idx}: "
                "training metrics are averaged over each reporting period, so each must be a "
                "number, a tensor or a numpy array (None for a batch without it); log text "
                "with logging instead."
            )
        checked[name] = value.detach() if isinstance(value, torch.Tensor) else value
    return checked


def check_validation_output(metrics: Any, keys: Optional[Any]) -> Any:
    if not isinstance(metrics, dict):
        raise TypeError(
            "evaluate_batch() must return a dictionary of string names to Tensor metrics; got "
            f"{type(metrics).__name__}: {metrics!r}."
        )
    if keys is not None and keys != metrics.keys():
        raise ValueError(
            "Validation metric names must match across all batches of data: "
            f"{sorted(keys)} != {sorted(metrics.keys())}."
        )
    for name, value in metrics.items():
        if not _is_numeric(value):
            raise TypeError(
                f"evaluate_batch() returned metric {name!r} of type {type(value).__name__}: metrics "
                "must be tensors, numpy arrays or numbers, which the evaluation reducer combines "
                "across batches."
            )
    return metrics.keys()


def _is_numeric(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    try:
        return np.asarray(value).dtype.kind in "biufc"
    except (TypeError, ValueError):
        return False


def to_numpy(metrics: Dict[str, Any]) -> Dict[str, Any]:
    return {
        k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
        for k, v in metrics.items()
    }


def to_host_without_waiting(metrics: Dict[str, Any], devices: Set[Any]) -> Dict[str, Any]:
    """``metrics`` with tensors detached, those on a GPU copied to the host without waiting
    (``non_blocking``: into page-locked memory, queued behind the work that computes them, so
    the copy holds the value as it is now, as Determined's per-batch ``.cpu()`` does, and the
    device keeps no pass's worth of them). Adds each such GPU to ``devices``; read the copies
    only after ``wait_for_host_copies(devices)``."""
    out = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if value.device.type == "cuda":
                devices.add(value.device)
                value = value.to("cpu", non_blocking=True)
        out[name] = value
    return out


def wait_for_host_copies(devices: Set[Any]) -> None:
    """One wait per GPU for the copies ``to_host_without_waiting`` queued on it."""
    for device in devices:
        torch.cuda.synchronize(device)
    devices.clear()


def per_batch_numpy(per_batch: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per-batch metrics as numpy values, converting each metric's tensors in one go: one copy
    to the host (one wait for a GPU) per metric, not one per batch.

    Each tensor becomes what Determined's per-batch ``tensor.cpu().numpy()`` makes, an array of
    the tensor's shape and dtype (a 0-d array for a scalar); other values stay as they are.

    >>> out = per_batch_numpy([{"loss": torch.tensor(1.5), "n": 3}, {"loss": torch.tensor(2.5)}])
    >>> [(type(b["loss"]).__name__, b["loss"].shape, float(b["loss"])) for b in out]
    [('ndarray', (), 1.5), ('ndarray', (), 2.5)]
    >>> out[0]["n"], "n" in out[1]
    (3, False)
    """
    if not per_batch:
        return []
    columns: Dict[str, List[Any]] = {}
    for metrics in per_batch:
        for name, value in metrics.items():
            columns.setdefault(name, []).append(value)
    converted: Dict[str, List[Any]] = {}
    for name, values in columns.items():
        first = values[0]
        # Stacked only where stacking changes nothing: torch.stack would promote mixed dtypes.
        stackable = (
            len(values) == len(per_batch)
            and isinstance(first, torch.Tensor)
            and all(
                isinstance(v, torch.Tensor)
                and v.shape == first.shape
                and v.dtype == first.dtype
                and v.device == first.device
                for v in values
            )
        )
        if stackable:
            stacked = torch.stack(values).cpu().numpy()
            converted[name] = [stacked[i, ...] for i in range(len(values))]
        else:
            converted[name] = [
                v.cpu().numpy() if isinstance(v, torch.Tensor) else v for v in values
            ]
    return [
        {name: converted[name][i] for name in converted if i < len(converted[name])}
        for i in range(len(per_batch))
    ]


STOP_ON_NONFINITE_LOSS_ENV = "DET_LIGHTNING_STOP_ON_NONFINITE_LOSS"


def stop_on_non_finite(option: Optional[bool] = None) -> bool:
    """Whether a non-finite ``loss`` stops training: ``Trainer(stop_on_nonfinite_loss=...)``
    when given, else ``$DET_LIGHTNING_STOP_ON_NONFINITE_LOSS``; by default training goes on,
    as it does in Determined and in Lightning.

    >>> stop_on_non_finite(True), stop_on_non_finite(False)
    (True, False)
    """
    return switch(
        option,
        "stop_on_nonfinite_loss",
        STOP_ON_NONFINITE_LOSS_ENV,
        on="stop on a NaN or infinite loss",
        off="train on, the default",
    )


def non_finite_batches(batch_metrics: List[Dict[str, Any]], first_batch_idx: int) -> List[int]:
    """The (0-based) batches whose ``loss`` is NaN or infinite; other metrics may be."""
    return [
        first_batch_idx + offset
        for offset, metrics in enumerate(batch_metrics)
        if is_numerical_scalar(metrics.get("loss")) and not math.isfinite(float(metrics["loss"]))
    ]


def check_non_finite(
    batch_metrics: List[Dict[str, Any]], first_batch_idx: int, stop: bool, warn: bool = True
) -> None:
    """Raises ``NonFiniteLossError`` (``stop``) or warns once for the reporting period when a
    batch's ``loss`` is NaN or infinite, naming the first such batch.

    Raises:
        det_lightning.errors.NonFiniteLossError: with ``stop``, for a non-finite loss.
    """
    bad = non_finite_batches(batch_metrics, first_batch_idx)
    if not bad:
        return
    value = float(batch_metrics[bad[0] - first_batch_idx]["loss"])
    problem = (
        f"Training metric 'loss' is {value} at batch {bad[0]} (0-based)"
        + (f", and at {len(bad) - 1} more batch(es) of this reporting period" if bad[1:] else "")
        + ". Lower the learning rate, clip gradients (step_optimizer(clip_grads=...)), or check "
        "the data of that batch."
    )
    if stop:
        raise errors.NonFiniteLossError(problem)
    if warn:
        logger.warning(
            f"{problem} Training goes on, as in Determined and Lightning; to stop at a "
            "non-finite loss instead, pass Trainer(stop_on_nonfinite_loss=True) or set "
            f"{STOP_ON_NONFINITE_LOSS_ENV}=1."
        )


def average_training_metrics(
    per_batch: List[Dict[str, Any]], dist: DistributedContext
) -> "tuple[Dict[str, Any], List[Dict[str, Any]]]":
    """(averages over the period, per-batch values); across ranks the per-batch values are
    first averaged over ranks, as Determined does. Every rank gets the result."""
    batch_metrics = per_batch_numpy(per_batch)
    if dist.size > 1:
        gathered = dist.allgather(batch_metrics)
        batch_metrics = [
            _mean_over_ranks([g[i] for g in gathered]) for i in range(len(batch_metrics))
        ]
    averages: Dict[str, Any] = {}
    for name in batch_metrics[0] if batch_metrics else {}:
        values = [m[name] for m in batch_metrics if m.get(name) is not None]
        try:
            averages[name] = np.mean(np.array(values)).item()
        except (TypeError, ValueError):
            if values:
                jsonable({name: values[0]})  # raises for a value that cannot even be reported
            averages[name] = None  # not averageable (arrays of unequal shapes): keep the name
    return averages, batch_metrics


def _mean_over_ranks(rank_values: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    averaged = {}
    for name in rank_values[0]:
        values = [r[name] for r in rank_values if r.get(name) is not None]
        try:
            averaged[name] = np.mean(np.array(values), axis=0)
        except (TypeError, ValueError):
            averaged[name] = rank_values[0][name]
    return averaged


def reduce_validation_metrics(
    batch_metrics: List[Dict[str, Any]],
    keys: Optional[Any],
    reducer: Any,
    dist: DistributedContext,
) -> Dict[str, Any]:
    """Reduces each rank's batches with the trial's reducers, then combines the ranks on
    every rank (AVG weighted by each rank's batch count)."""
    names = list(keys) if keys is not None else []  # the first batch's order, as Determined
    if dist.size > 1:
        names = list(dict.fromkeys(n for rank in dist.allgather(names) for n in rank))
    if not names:
        return {}
    reducers = prepare_reducers(reducer, names)
    mine = {
        name: simple_reduce(reducers[name], np.stack([b[name] for b in batch_metrics], axis=0))
        for name in names
        if batch_metrics
    }
    if dist.size == 1:
        return mine
    gathered = [g for g in dist.allgather((mine, len(batch_metrics))) if g[1] > 0]
    return {
        name: simple_reduce(
            reducers[name], np.stack([g[0][name] for g in gathered]), [g[1] for g in gathered]
        )
        for name in names
    }


def _plain(value: Any) -> Any:
    """``value`` with numpy values and tensors turned into Python ones, also inside lists,
    tuples and dicts (a metric may be a list of predictions)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def jsonable(metrics: Dict[str, Any]) -> Dict[str, Any]:
    """Metrics as JSON-ready Python values; a clear error for values that cannot be."""
    out: Dict[str, Any] = {}
    for name, value in metrics.items():
        value = _plain(value)
        try:
            json.dumps(value, allow_nan=True)
        except TypeError as e:
            raise TypeError(
                f"Metric {name!r} has a value of type {type(value).__name__} that cannot be "
                "reported: return numbers, tensors, numpy arrays, or lists/dicts of them."
            ) from e
        out[name] = value
    return out


def format_metrics(metrics: Dict[str, Any]) -> str:
    """``metrics`` as a log line shows them: a dict of plain numbers, floats to 4 significant
    digits (numpy scalars and tensors as the numbers they hold); one that could not be
    reported raises.

    >>> format_metrics({"validation_loss": np.float64(0.26050577498972416), "batches": 32,
    ...                 "per_class": [np.float32(0.5), 1e-7], "note": None})
    "{'validation_loss': 0.2605, 'batches': 32, 'per_class': [0.5, 1e-07], 'note': None}"
    """
    return _short(jsonable(metrics))


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return repr(value)


def log_training(steps_completed: int, metrics: Dict[str, Any]) -> None:
    """Reports the period's training metrics in Determined's words, the numbers short."""
    core_logger.info(
        f"report_training_metrics(steps_completed={steps_completed}, "
        f"metrics={format_metrics(metrics)})"
    )


def log_validation(steps_completed: int, metrics: Dict[str, Any]) -> None:
    """Reports validation metrics in Determined's words (see ``log_training``)."""
    core_logger.info(
        f"report_validation_metrics(steps_completed={steps_completed}, "
        f"metrics={format_metrics(metrics)})"
    )


def scalars(metrics: Dict[str, Any], prefix: str = "") -> Dict[str, float]:
    """The numerical scalars of ``metrics``, as floats, for loggers."""
    return {
        prefix + name: float(value) for name, value in metrics.items() if is_numerical_scalar(value)
    }


def host_scalars(metrics: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The numerical scalars of ``metrics`` as 0-d tensors on the host, for ``self.log``.

    Given a float, Lightning makes the tensor on the module's device: on a GPU one copy from
    pageable memory (the host waits for all queued work), a few kernels per pass to average it,
    and another wait to read it back for the progress bar and ``callback_metrics``. These
    values are on the host already (reduced there, as Determined reduces them); given a host
    tensor, Lightning keeps what it logs for it on the host. The dtype is the one Lightning
    gives a float (the default, at least float32).

    >>> logged = host_scalars({"loss": 0.5, "name": "x"})
    >>> list(logged), logged["loss"].device.type, logged["loss"].dtype, logged["loss"].shape
    (['loss'], 'cpu', torch.float32, torch.Size([]))
    """
    dtype = torch.get_default_dtype()
    dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    return {name: torch.tensor(value, dtype=dtype) for name, value in scalars(metrics).items()}
