"""The CUDA benchmark's measurement window (``benchmarks/cuda_window.py``) on a device: it counts
the synchronisations a loop makes, and adds none of its own to the batches it counts.

Written without a GPU (2026-11-24); first to run where ``scripts/gpu-check.sh`` runs.
"""

import pathlib
import sys
from typing import Any, Dict, Iterator

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.gpu

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not torch.cuda.is_available():  # a gpu-marked test run without a GPU is a failure
        pytest.fail("tests/gpu needs a CUDA device; CI deselects them with -m 'not gpu'")


@pytest.fixture(scope="module")
def cuda_window() -> Iterator[Any]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import cuda_window

        yield cuda_window
    finally:
        sys.path.remove(str(BENCHMARKS))


def _loop(cuda_window: Any, steps: int, read_loss: bool) -> Dict[str, Any]:
    """A training loop on data already on the device; ``read_loss``: ``loss.item()`` once per
    batch, the one synchronisation there is."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 32, device="cuda"), torch.randn(32, 1, device="cuda")
    window = cuda_window.CudaWindow(steps)
    for i in range(steps):
        window.at_start(i)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if read_loss:
            loss.item()
        window.at_end(i)
    return window.result()


def test_a_loop_without_synchronisations_counts_none(cuda_window: Any) -> None:
    result = _loop(cuda_window, 60, read_loss=False)
    assert result["syncs_per_batch"] == 0
    assert result["batches_counted"] == 13 and result["batches_timed"] == 41
    assert result["device_per_step_s"] > 0 and result["peak_memory_mb"] > 0


def test_one_item_per_batch_counts_one_synchronisation_per_batch(cuda_window: Any) -> None:
    assert _loop(cuda_window, 60, read_loss=True)["syncs_per_batch"] == 1


def test_the_window_leaves_sync_debug_mode_off(cuda_window: Any) -> None:
    _loop(cuda_window, 10, read_loss=True)
    assert torch.cuda.get_sync_debug_mode() == 0
