"""``precision="bf16-mixed"`` on a CUDA device: bfloat16 autocast in every training batch, and
a resume mid-epoch that matches the straight run bit for bit (the CUDA generator's dropout
state included). The CPU twin is ``tests/integration/test_bf16.py``.

Written without a GPU (2026-11-27); first to run where ``scripts/gpu-check.sh`` runs.
"""

import pathlib

import pytest
import torch

from tests.fixtures.bf16 import assert_bf16_and_resumed_exactly, straight_and_resumed

pytestmark = pytest.mark.gpu


def test_bf16_mixed_on_cuda_trains_in_bfloat16_and_resumes_exactly(
    tmp_path: pathlib.Path,
) -> None:
    if not torch.cuda.is_available():  # a gpu-marked test run without a GPU is a failure
        pytest.fail("tests/gpu needs a CUDA device; CI deselects them with -m 'not gpu'")
    straight, resumed = straight_and_resumed("gpu", tmp_path)
    assert_bf16_and_resumed_exactly(straight, resumed, "cuda")
