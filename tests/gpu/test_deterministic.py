"""Deterministic mode on the GPU: det_lightning and the real Determined 0.38.1 train the same
weights bit for bit (a trial with convolutions, dropout and a shuffled loader), and so do two
det_lightning runs. Each run is a process of its own (``deterministic_child.py``): torch's
flags and cuBLAS's workspace setting are process-wide, and are fixed when CUDA starts.

Written without a GPU (2026-11-27); first to run where ``scripts/gpu-check.sh`` runs.
"""

import pathlib
import subprocess
import sys
from typing import Any, Dict

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not torch.cuda.is_available():  # a gpu-marked test run without a GPU is a failure
        pytest.fail("tests/gpu needs a CUDA device; CI deselects them with -m 'not gpu'")


def _run(which: str, out: pathlib.Path) -> Dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.gpu.deterministic_child", which, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(out, weights_only=True)


def _assert_identical(a: Dict[str, Any], b: Dict[str, Any]) -> None:
    assert torch.equal(a["losses"], b["losses"])
    assert a["validations"] == b["validations"]
    assert a["state"].keys() == b["state"].keys()
    for key in a["state"]:
        assert torch.equal(a["state"][key], b["state"][key]), key


def test_det_lightning_matches_determined_bit_for_bit(tmp_path: pathlib.Path) -> None:
    ours = _run("det_lightning", tmp_path / "ours.pt")
    theirs = _run("determined", tmp_path / "theirs.pt")
    assert len(ours["losses"]) == 24 and len(ours["validations"]) == 2
    _assert_identical(ours, theirs)


def test_two_det_lightning_runs_match_bit_for_bit(tmp_path: pathlib.Path) -> None:
    _assert_identical(
        _run("det_lightning", tmp_path / "a.pt"), _run("det_lightning", tmp_path / "b.pt")
    )
