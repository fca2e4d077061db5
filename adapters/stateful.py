"""The trial's stateful objects, registered once: what ``state_dict.pth`` holds and how each
entry is put back. Saving and restoring are one loop each over ``trial_slots``::

    key in state_dict.pth      object                            a checkpoint without the key
    models_state_dict          context.models, without wrappers  a mismatch error
    optimizers_state_dict      context.optimizers                a mismatch error
    lr_schedulers_state_dict   context.lr_schedulers             a mismatch error, unless none
    callbacks                  build_callbacks(), by name        nothing restored
    rng_state                  random, numpy, torch (and CUDA)   a warning
    scaler_state_dict          context.engine.scaler, if there is one  a warning

Checkpoints of older Determined versions name one model, optimizer or scheduler
(``model_state_dict``, ``optimizer_state_dict``, ``lr_scheduler``); they load as a list of one.
Both loops go in this order, the file's (Determined's); the RNGs come before the scaler, whose
restoring draws no random numbers. ``pytorch.Trainer`` saves and restores every slot (``CheckpointManager.state_dict``,
``resume.apply_state``); ``LightningTrial`` only those Lightning's own checkpoint lacks.
"""

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Protocol, Sequence

import torch

from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._state_dicts import (
    capture_rng_state,
    load_list,
    load_model_states,
    model_state_dicts,
    restore_rng_state,
)

if TYPE_CHECKING:
    from det_lightning.pytorch._callback import PyTorchCallback
    from det_lightning.pytorch._context import PyTorchTrialContext

logger = logging.getLogger("det_lightning.pytorch")


class Stateful(Protocol):
    """What ``torch`` objects offer and a slot needs: ``state_dict`` and ``load_state_dict``."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class Slot:
    """One key of ``state_dict.pth`` and the object saved under it.

    Attributes:
        key: the key in ``state_dict.pth``.
        obj: saved with ``obj.state_dict()``, restored with ``obj.load_state_dict(...)``.
        old_key: the key older Determined versions saved one such object under.
        empty: what a checkpoint without ``key`` restores (None: nothing).
        warning: logged when a checkpoint lacks ``key`` and there is no ``empty``.
    """

    key: str
    obj: Stateful
    old_key: Optional[str] = None
    empty: Optional[List[Any]] = None
    warning: str = ""


def trial_slots(
    context: "PyTorchTrialContext", callbacks: Mapping[str, "PyTorchCallback"]
) -> List[Slot]:
    """Every stateful object of a trial, in ``state_dict.pth``'s order (Determined's)."""
    slots = [
        Slot(ckpt.MODELS, _Models(context.models), "model_state_dict", empty=[]),
        Slot(
            ckpt.OPTIMIZERS,
            _Each(context.optimizers, "optimizer"),
            "optimizer_state_dict",
            empty=[],
        ),
        Slot(
            ckpt.LR_SCHEDULERS,
            _Each(context.lr_schedulers, "LR scheduler"),
            "lr_scheduler",
            empty=[],
        ),
        Slot(ckpt.CALLBACKS, _ByName(callbacks)),
        Slot(
            ckpt.RNG_STATE,
            _GlobalRNG(cuda_index(context.device)),
            warning="The checkpoint has no random state to restore.",
        ),
    ]
    if context.engine.scaler is not None:
        slots.append(
            Slot(
                ckpt.SCALER,
                context.engine.scaler,
                warning="The experiment uses a GradScaler but the checkpoint has no scaler state.",
            )
        )
    return slots


def save(slots: Sequence[Slot]) -> Dict[str, Any]:
    """``{key: state}`` of every slot, in their order."""
    return {slot.key: slot.obj.state_dict() for slot in slots}


def restore(slots: Sequence[Slot], state: Dict[str, Any], warn: bool = True) -> None:
    """Loads each slot from ``state``, in the slots' order.

    Args:
        slots: from ``trial_slots``.
        state: a ``state_dict.pth`` content (or the part of one a Lightning checkpoint carries).
        warn: log the warning of a slot ``state`` lacks.

    Raises:
        InvalidCheckpointException: the state of models, optimizers or schedulers does not fit
            the trial's.
    """
    for slot in slots:
        if slot.old_key is not None and slot.old_key in state:
            slot.obj.load_state_dict([state[slot.old_key]])
        elif slot.key in state or slot.empty is not None:
            slot.obj.load_state_dict(state.get(slot.key, slot.empty))
        elif warn and slot.warning:
            logger.warning(slot.warning)


def cuda_index(device: torch.device) -> Optional[int]:
    """The CUDA device whose generator a checkpoint carries (None off the GPU)."""
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


class _Models:
    def __init__(self, models: List[torch.nn.Module]) -> None:
        self.models = models

    def state_dict(self) -> List[Dict[str, Any]]:
        return model_state_dicts(self.models)

    def load_state_dict(self, states: List[Dict[str, Any]]) -> None:
        load_model_states(self.models, list(states))


class _Each:
    """A list of optimizers or schedulers, saved and restored one to one."""

    def __init__(self, objects: List[Any], what: str) -> None:
        self.objects = objects
        self.what = what

    def state_dict(self) -> List[Any]:
        return [obj.state_dict() for obj in self.objects]

    def load_state_dict(self, states: List[Any]) -> None:
        load_list(self.objects, list(states), self.what)


class _ByName:
    """``PyTorchCallback``s by name; one the checkpoint has no state for keeps its own."""

    def __init__(self, objects: Mapping[str, Stateful]) -> None:
        self.objects = objects

    def state_dict(self) -> Dict[str, Any]:
        return {name: obj.state_dict() for name, obj in self.objects.items()}

    def load_state_dict(self, states: Dict[str, Any]) -> None:
        for name, obj in self.objects.items():
            if name in states:
                obj.load_state_dict(states[name])


class _GlobalRNG:
    def __init__(self, cuda_device: Optional[int]) -> None:
        self.cuda_device = cuda_device

    def state_dict(self) -> Dict[str, Any]:
        return capture_rng_state(self.cuda_device)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        restore_rng_state(state, self.cuda_device)
