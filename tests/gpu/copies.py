"""The host-to-device copies a run makes, recorded (for ``tests/gpu``)."""

from typing import Any, List, Tuple

import pytest
import torch
from torch import nn


def record_host_to_device_copies(monkeypatch: pytest.MonkeyPatch) -> List[Tuple[bool, bool]]:
    """From now on, each copy of a tensor from the host to a CUDA device: ``(non_blocking,
    the source was pinned)``. A module's parameters moving onto the device (``model.to``,
    which passes ``non_blocking`` by position) are no batch and are left out."""
    copies: List[Tuple[bool, bool]] = []
    real_to = torch.Tensor.to

    def recording_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = real_to(self, *args, **kwargs)
        moved = self.device.type == "cpu" and out.device.type == "cuda"
        if moved and not isinstance(self, nn.Parameter):
            copies.append((kwargs.get("non_blocking", False), self.is_pinned()))
        return out

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    return copies
