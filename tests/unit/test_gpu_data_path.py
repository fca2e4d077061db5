"""The data path to a CUDA device, decided on the CPU: which copies ``context.to_device`` queues
without waiting (``non_blocking=True``) and which loaders pin their batches.

No GPU is needed: ``torch.Tensor.to`` is replaced by a recorder (a copy to ``cuda:0`` would fail
here), and the loaders are built for a context whose device is ``cuda:0`` but never iterated
(torch warns only when a pinning loader is iterated without CUDA). ``tests/gpu/test_cuda.py``
runs the same path on a device, with torch's sync debug mode on.
"""

import collections
import logging
from typing import Any, Iterator, List, Tuple

import numpy as np
import pytest
import torch
from torch.utils import data

from det_lightning import pytorch
from det_lightning.pytorch._data import copy_options, pins_memory, to_device

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
Pair = collections.namedtuple("Pair", "x y")


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[Tuple[Any, Any]]]:
    """Each ``Tensor.to`` call's ``(device, keyword arguments)``; the tensor stays where it is."""
    calls: List[Tuple[Any, Any]] = []

    def record(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append((args[0] if args else None, kwargs))
        return self

    monkeypatch.setattr(torch.Tensor, "to", record)
    yield calls


def _batch() -> Any:
    return {
        "x": torch.ones(4, 2),
        "arr": np.zeros((4, 2), dtype=np.float32),
        "rest": [torch.zeros(4), (torch.ones(4), "tag"), Pair(torch.ones(4), torch.zeros(4))],
    }


def test_copies_to_cuda_do_not_wait_and_other_copies_block() -> None:
    assert copy_options(CUDA) == {"non_blocking": True}
    assert copy_options(torch.device("cuda", 3)) == {"non_blocking": True}
    assert copy_options(CPU) == {}  # Determined's call, word for word
    assert copy_options(torch.device("meta")) == {}


def test_every_tensor_bound_for_cuda_is_copied_non_blocking(copies: List[Any]) -> None:
    moved = to_device(_batch(), CUDA)
    assert copies == [(CUDA, {"non_blocking": True})] * 6  # x, arr, and four nested tensors
    assert isinstance(moved["rest"][2], Pair) and moved["rest"][1][1] == "tag"


def test_copies_to_the_cpu_keep_determined_blocking_call(copies: List[Any]) -> None:
    context = pytorch.PyTorchTrialContext(device=CPU)
    context.to_device(_batch())
    assert copies == [(CPU, {})] * 6


def test_the_context_copies_to_its_cuda_device_non_blocking(copies: List[Any]) -> None:
    context = pytorch.PyTorchTrialContext(device=CUDA)
    context.to_device([torch.ones(2), {"y": torch.zeros(2)}])
    assert copies == [(CUDA, {"non_blocking": True})] * 2


class _Moves:
    """A batch type of the user's with a ``.to(device)`` that takes no other argument."""

    def __init__(self) -> None:
        self.to_calls: List[Any] = []

    def to(self, device: torch.device) -> "_Moves":
        self.to_calls.append(device)
        return self


def test_a_users_own_to_gets_the_device_only(caplog: pytest.LogCaptureFixture) -> None:
    item = _Moves()
    warned: "set[type]" = set()
    with caplog.at_level(logging.WARNING):
        out = to_device([item, object(), object()], CUDA, warned)
    assert out[0] is item and item.to_calls == [CUDA]
    # Determined's warning for what cannot move, once per type, whatever the device.
    assert [r.getMessage() for r in caplog.records] == [
        "Was not able to move data item of type 'object' to device."
    ]
    assert warned == {object}


def test_a_loader_pins_by_default_only_for_cuda() -> None:
    assert pins_memory(None, CUDA) and not pins_memory(None, CPU)
    assert not pins_memory(None, None)  # iterated outside a trial: Determined's default
    assert not pins_memory(False, CUDA)  # asked not to: Determined's behaviour
    assert pins_memory(True, CPU)  # asked to: as given (torch warns then, as it would)


class _Trial:
    def __init__(self, pin_memory: Any) -> None:
        self.kwargs = {} if pin_memory == "default" else {"pin_memory": pin_memory}

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(data.TensorDataset(torch.ones(8, 2)), batch_size=2, **self.kwargs)

    build_validation_data_loader = build_training_data_loader


@pytest.mark.parametrize(
    "device, pin_memory, pinned",
    [(CUDA, "default", True), (CPU, "default", False), (CUDA, False, False), (CUDA, True, True)],
)
def test_the_trainers_loaders_pin_as_decided(device: Any, pin_memory: Any, pinned: bool) -> None:
    from adapters.data import build_training_view, build_validation_loader

    context = pytorch.PyTorchTrialContext(device=device)
    trial = _Trial(pin_memory)
    view, _ = build_training_view(trial, context, 0, None, base_seed=None)
    assert view.loader.pin_memory is pinned
    assert build_validation_loader(trial, context, evaluate_batch=True).pin_memory is pinned


def test_a_loader_iterated_by_the_user_pins_nothing_by_default() -> None:
    loader = pytorch.DataLoader(data.TensorDataset(torch.ones(8, 2)), batch_size=2)
    assert loader.pin_memory is None
    assert loader.get_data_loader().pin_memory is False
    assert [b[0].shape for b in loader] == [torch.Size([2, 2])] * 4


@pytest.mark.parametrize(
    "device, kwargs, pinned",
    [(CUDA, {}, True), (CPU, {}, False), (CUDA, {"pin_memory": False}, False)],
)
def test_batch_inference_loaders_pin_as_decided(
    device: Any, kwargs: Any, pinned: bool, isolated_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torch_batch_process``'s loader pins for a CUDA device unless asked not to (recorded
    here, then built unpinned: iterating a pinning loader without CUDA warns)."""
    from det_lightning.pytorch.experimental import TorchBatchProcessor, torch_batch_process
    from det_lightning.pytorch.experimental import _torch_batch_process as module

    asked: List[Any] = []
    real = data.DataLoader

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, pin_memory: bool = False, **rest: Any) -> None:
            asked.append(pin_memory)
            super().__init__(*args, pin_memory=False, **rest)

    class Noop(TorchBatchProcessor):
        def __init__(self, context: Any) -> None:
            assert context.device == device

        def process_batch(self, batch: Any, batch_idx: int) -> None:
            pass

    monkeypatch.setattr(module, "get_default_device", lambda core_context: device)
    monkeypatch.setattr(data, "DataLoader", Recording)
    torch_batch_process(Noop, list(range(8)), batch_size=2, dataloader_kwargs=kwargs)
    assert asked == [pinned]
