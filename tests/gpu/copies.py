"""The host-to-device copies a run makes, recorded (for ``tests/gpu``)."""

from typing import Any, List, NamedTuple, Tuple

import pytest
import torch
from torch import nn


class Copy(NamedTuple):
    non_blocking: bool
    pinned: bool  # the source was page-locked
    shape: Tuple[int, ...]


def record_host_to_device_copies(monkeypatch: pytest.MonkeyPatch) -> List[Copy]:
    """From now on, each copy of a tensor from the host to a CUDA device. A module's parameters
    moving onto the device (``model.to``, which passes ``non_blocking`` by position) are no
    batch and are left out."""
    copies: List[Copy] = []
    real_to = torch.Tensor.to

    def recording_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = real_to(self, *args, **kwargs)
        moved = self.device.type == "cpu" and out.device.type == "cuda"
        if moved and not isinstance(self, nn.Parameter):
            copies.append(
                Copy(kwargs.get("non_blocking", False), self.is_pinned(), tuple(self.shape))
            )
        return out

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    return copies
