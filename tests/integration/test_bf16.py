"""``precision="bf16-mixed"`` (``--precision bf16-mixed``, ``optimizations.precision``) on the
CPU: every training batch runs under bfloat16 autocast, and a run stopped mid-epoch resumes
into the weights of one that never stopped, bit for bit. ``tests/gpu/test_bf16.py`` is the same
on a CUDA device."""

import pathlib

from tests.fixtures.bf16 import assert_bf16_and_resumed_exactly, straight_and_resumed


def test_bf16_mixed_trains_in_bfloat16_and_resumes_exactly(tmp_path: pathlib.Path) -> None:
    straight, resumed = straight_and_resumed("cpu", tmp_path)
    assert_bf16_and_resumed_exactly(straight, resumed, "cpu")
