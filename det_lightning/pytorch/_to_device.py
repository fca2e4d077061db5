"""Batches to the trial's device: ``to_device`` (Determined's ``context.to_device``), the copy
options it uses, and whether a ``DataLoader`` pins its batches for that device.
"""

import logging
from typing import Any, Dict, Optional, Set, Type

import numpy as np
import torch

logger = logging.getLogger("det_lightning.pytorch")


def pins_memory(pin_memory: Optional[bool], device: Optional[torch.device]) -> bool:
    """Whether a ``DataLoader`` built for a trial on ``device`` pins its batches: as asked, or,
    by default (``None``), when they go to a CUDA device (pinning without CUDA only warns).

    >>> pins_memory(None, torch.device("cuda", 0)), pins_memory(None, torch.device("cpu"))
    (True, False)
    >>> pins_memory(False, torch.device("cuda", 0)), pins_memory(None, None)
    (False, False)
    """
    if pin_memory is not None:
        return pin_memory
    return device is not None and device.type == "cuda"


def copy_options(device: torch.device) -> Dict[str, Any]:
    """The keyword arguments of ``tensor.to(device, ...)`` in ``to_device``: a copy to a CUDA
    device is queued on the current stream without waiting for the device (the host runs on to
    the next step; from pinned memory the copy overlaps the step before); any other copy (to
    the CPU: a read of results) stays blocking, as in Determined.

    >>> copy_options(torch.device("cuda", 0)), copy_options(torch.device("cpu"))
    ({'non_blocking': True}, {})
    """
    return _ASYNC if device.type == "cuda" else _BLOCKING


_ASYNC: Dict[str, Any] = {"non_blocking": True}
_BLOCKING: Dict[str, Any] = {}


def to_device(data: Any, device: torch.device, warned_types: Optional[Set[Type]] = None) -> Any:
    """Moves tensors (and numeric numpy arrays) in nested dicts, lists and tuples to ``device``.

    Anything else with a ``.to()`` method is moved too; other objects are returned unchanged
    with one warning per type. Tensors bound for a CUDA device are copied with
    ``non_blocking=True`` (``copy_options``).
    """
    if warned_types is None:
        warned_types = set()
    return move_to_device(data, device, warned_types, copy_options(device))


def move_to_device(
    data: Any, device: torch.device, warned_types: Set[Type], kw: Dict[str, Any]
) -> Any:
    """``to_device`` with the copy's keyword arguments given (``copy_options(device)``)."""
    if isinstance(data, torch.Tensor):
        return data.to(device, **kw)
    # (a plain tensor inside is moved here, without a call of its own)
    if isinstance(data, dict):
        return {
            k: v.to(device, **kw)
            if type(v) is torch.Tensor
            else move_to_device(v, device, warned_types, kw)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        moved = [
            v.to(device, **kw)
            if type(v) is torch.Tensor
            else move_to_device(v, device, warned_types, kw)
            for v in data
        ]
        if isinstance(data, list):
            return moved
        return type(data)(*moved) if hasattr(data, "_fields") else tuple(moved)
    if isinstance(data, np.ndarray) and data.dtype.kind in "fciub":
        return torch.from_numpy(data).to(device, **kw)
    if callable(getattr(data, "to", None)):
        try:
            return data.to(device)
        except Exception as e:
            raise RuntimeError(
                f"Was not able to move data item of type '{type(data).__name__}' to device "
                f"{device}: its .to() raised {type(e).__name__}: {e}. Return tensors, numpy "
                "arrays, or dicts/lists/tuples of them from the data loader, or call "
                "context.experimental.disable_auto_to_device() and move batches yourself."
            ) from e
    if type(data) not in warned_types:
        warned_types.add(type(data))
        logger.warning(f"Was not able to move data item of type '{type(data).__name__}' to device.")
    return data
