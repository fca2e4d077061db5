"""Deterministic mode on the GPU: det_lightning and the real Determined 0.38.1 train the same
weights bit for bit (a trial with convolutions, dropout and a shuffled loader), and so do two
det_lightning runs. Each run is a process of its own (``deterministic_child.py``): torch's
flags and cuBLAS's workspace setting are process-wide, and are fixed when CUDA starts.

The two bit-for-bit tests passed on an NVIDIA H200 (2026-11-29); the comparison without the
mode was written after that run and is still to run on a GPU.
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


def _run(which: str, out: pathlib.Path, *flags: str) -> Dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.gpu.deterministic_child", which, str(out), *flags],
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


def _largest_difference(a: Dict[str, Any], b: Dict[str, Any]) -> float:
    return max(
        [float((a["losses"] - b["losses"]).abs().max())]
        + [float((a["state"][k].float() - b["state"][k].float()).abs().max()) for k in a["state"]]
    )


def test_without_the_mode_det_lightning_is_as_far_from_determined_as_determined_from_itself(
    tmp_path: pathlib.Path,
) -> None:
    """Without the deterministic mode (neither framework's default sets it), a GPU may reduce
    in another order from one run to the next (cuDNN's and cuBLAS's atomics), so bit identity
    is not the claim. The claim: det_lightning's difference from Determined is of the size of
    Determined's from itself, run to run (none where Determined repeats itself exactly)."""
    ours = _run("det_lightning", tmp_path / "ours.pt", "--no-mode")
    theirs = _run("determined", tmp_path / "theirs.pt", "--no-mode")
    again = _run("determined", tmp_path / "again.pt", "--no-mode")
    spread = _largest_difference(theirs, again)
    apart = _largest_difference(ours, theirs)
    report = f"det_lightning vs Determined {apart:.3g}; Determined vs Determined {spread:.3g}"
    assert apart <= 10 * spread, report
