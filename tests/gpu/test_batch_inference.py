"""``torch_batch_process`` on a CUDA device (marked ``gpu``: CI has none; run with
``pytest -m gpu tests/gpu``): the processor's device is ``cuda:<local rank>`` as Determined's
``get_default_device`` chose it, batches come to it from pinned memory without waiting, and
the job adds no host-device synchronisation between two batches (the CPU tests cover the rest:
``tests/unit/test_torch_batch_process.py``, ``tests/compat/test_torch_batch_process_parity.py``).
"""

import pathlib
import warnings
from typing import Any, List

import pytest
import torch
from torch import nn

from det_lightning.pytorch.experimental import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    torch_batch_process,
)
from tests.gpu.copies import record_host_to_device_copies

pytestmark = pytest.mark.gpu

SYNC = "called a synchronizing CUDA operation"  # torch's sync debug mode warning
BATCHES = 24


@pytest.fixture(autouse=True)
def _needs_cuda(isolated_run: pathlib.Path) -> None:
    if not torch.cuda.is_available():  # a gpu-marked test run without a GPU is a failure
        pytest.fail("tests/gpu needs a CUDA device; CI deselects them with -m 'not gpu'")


class Rows(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4 * BATCHES

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((16,), float(index))


class Infer(TorchBatchProcessor):
    """A model on the device; sync debug mode on from the end of batch 1 to the start of the
    second-to-last batch (the job's own code between batches), off in the processor's code."""

    devices: List[torch.device] = []
    models: List[nn.Module] = []
    outputs: List[torch.Tensor] = []

    def __init__(self, context: TorchBatchProcessorContext) -> None:
        self.context = context
        self.model = context.prepare_model_for_inference(nn.Linear(16, 1))
        Infer.devices.append(context.device)
        Infer.models.append(self.model)

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        torch.cuda.set_sync_debug_mode(0)
        with torch.no_grad():
            Infer.outputs.append(self.model(self.context.to_device(batch)))
        torch.cuda.set_sync_debug_mode(1 if 1 <= batch_idx < BATCHES - 2 else 0)


def test_batches_go_to_cuda_from_pinned_memory_without_a_sync_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Infer.devices, Infer.models, Infer.outputs = [], [], []
    copies = record_host_to_device_copies(monkeypatch)  # not the model's own move
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch_batch_process(Infer, Rows(), batch_size=4, checkpoint_interval=1000)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [f"{w.filename}:{w.lineno}" for w in caught if str(w.message).startswith(SYNC)]
    assert syncs == []
    assert Infer.devices == [torch.device("cuda", 0)]
    assert len(copies) == BATCHES and {c[:2] for c in copies} == {(True, True)}, copies
    assert len(Infer.outputs) == BATCHES
    assert {o.device.type for o in Infer.outputs} == {"cuda"}
    model = Infer.models[0].cpu()  # the same numbers as the model on the CPU
    expected = model(torch.stack([Rows()[i] for i in range(4 * BATCHES)])).detach()
    torch.testing.assert_close(torch.cat(Infer.outputs).cpu(), expected)
