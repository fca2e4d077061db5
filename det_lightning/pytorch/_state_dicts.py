"""The state dicts of a trial's objects as Determined saves them: the global RNGs, and models
without their wrappers.

``rng_state`` holds ``cpu_rng_state``, ``np_rng_state``, ``random_rng_state`` and, on a GPU,
``gpu_rng_state``; numpy's key array is kept as a tensor so that ``torch.load(weights_only=True)``
reads it back. Models are saved without the ``module.`` (DDP) and ``_orig_mod.``
(``torch.compile``) prefixes of their wrappers, and either is accepted on load.
"""

import logging
import random
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from det_lightning import errors
from det_lightning.pytorch._checkpoint import MODELS

logger = logging.getLogger("det_lightning.pytorch")


# ----- RNG state ------------------------------------------------------------------------------
def capture_rng_state(cuda_device: Optional[int] = None) -> Dict[str, Any]:
    """The global RNG states, in Determined's keys, as types ``weights_only`` loading accepts."""
    state: Dict[str, Any] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": _tensor_np_state(np.random.get_state()),
        "random_rng_state": random.getstate(),
    }
    if cuda_device is not None and torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state(cuda_device)
    return state


def _tensor_np_state(np_state: Any) -> Tuple[Any, ...]:
    """numpy's ``get_state()`` tuple with its key array as an int64 tensor."""
    kind, key, pos, has_gauss, cached = np_state
    if not isinstance(key, torch.Tensor):
        key = torch.from_numpy(np.asarray(key).astype(np.int64))
    return (str(kind), key, int(pos), int(has_gauss), float(cached))


def safe_rng_state(state: Dict[str, Any]) -> Dict[str, Any]:
    """``state`` (ours or Determined's, which pickles a numpy array) in ``weights_only`` types."""
    safe = dict(state)
    if "np_rng_state" in safe:
        safe["np_rng_state"] = _tensor_np_state(safe["np_rng_state"])
    return safe


def restore_rng_state(state: Dict[str, Any], cuda_device: Optional[int] = None) -> None:
    """Sets the global RNGs from ``capture_rng_state``'s (or Determined's) state."""
    kind, key, *rest = state["np_rng_state"]
    if isinstance(key, torch.Tensor):
        key = key.numpy()
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), *rest))
    version, internal, gauss = state["random_rng_state"]
    random.setstate((version, tuple(internal), gauss))
    torch.random.set_rng_state(state["cpu_rng_state"])
    if cuda_device is not None and torch.cuda.is_available():
        if "gpu_rng_state" in state:
            torch.cuda.set_rng_state(state["gpu_rng_state"], cuda_device)
        else:
            logger.warning("The system has a gpu but no gpu_rng_state exists in the checkpoint.")


# ----- models ---------------------------------------------------------------------------------
def plain_model(model: nn.Module) -> nn.Module:
    """The module inside DDP/DataParallel and ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod  # type: ignore[assignment]
        else:
            return model


def model_state_dicts(models: Iterable[nn.Module]) -> List[Dict[str, Any]]:
    """``models_state_dict``: each model's weights under its plain (unwrapped) keys."""
    return [plain_model(model).state_dict() for model in models]


def load_models(models: List[nn.Module], checkpoint: Dict[str, Any]) -> None:
    """Loads ``models_state_dict`` (or the older single ``model_state_dict``) into ``models``.

    Raises:
        InvalidCheckpointException: the checkpoint's models do not fit ``models``.
    """
    if "model_state_dict" in checkpoint:
        load_model_states(models, [checkpoint["model_state_dict"]])
    else:
        load_model_states(models, list(checkpoint.get(MODELS, [])))


def load_model_states(models: List[nn.Module], states: List[Dict[str, Any]]) -> None:
    """Loads one state dict into each of ``models``, accepting wrapper prefixes.

    Raises:
        InvalidCheckpointException: ``states`` do not fit ``models``.
    """
    if len(states) != len(models):
        raise errors.InvalidCheckpointException(
            f"The checkpoint has {len(states)} model state dicts but the trial wrapped "
            f"{len(models)} models: it was written by a trial of another shape."
        )
    for idx, (model, state) in enumerate(zip(models, states)):
        _load_model(idx, plain_model(model), state)


def _load_model(idx: int, model: nn.Module, state: Dict[str, Any]) -> None:
    expected = model.state_dict()
    state = _strip_prefixes(state, expected)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    what = f"Model {idx} ({type(model).__name__}) does not match the checkpoint"
    if missing or unexpected:
        raise errors.InvalidCheckpointException(
            f"{what}: missing keys {missing[:8]}, unexpected keys {unexpected[:8]}. The "
            "checkpoint was written by a trial with another model shape."
        )
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise errors.InvalidCheckpointException(f"{what}: {e}") from e


def _strip_prefixes(state: Dict[str, Any], expected: Dict[str, Any]) -> Dict[str, Any]:
    """Drops DDP's ``module.`` and torch.compile's ``_orig_mod.`` (as Determined wrote them for
    wrapped models) when every key has them and the model's own keys do not."""
    for prefix in ("module.", "_orig_mod.", "module."):
        if (
            state
            and all(k.startswith(prefix) for k in state)
            and not any(k.startswith(prefix) for k in expected)
        ):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def load_list(objects: Iterable[Any], states: List[Any], what: str) -> None:
    """Loads ``states`` into ``objects`` (optimizers, schedulers) one to one."""
    objects = list(objects)
    if len(states) != len(objects):
        raise errors.InvalidCheckpointException(
            f"The checkpoint has {len(states)} {what} state dicts but the trial wrapped "
            f"{len(objects)}: it was written by a trial of another shape."
        )
    for obj, state in zip(objects, states):
        obj.load_state_dict(state)
