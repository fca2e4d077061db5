"""``init()``'s launch options in one process (multi-process runs: ``tests/distributed``)."""

import pytest

from det_lightning import pytorch
from det_lightning.pytorch._launch_options import LaunchOptions


def test_spawning_strategies_are_refused_with_the_alternative() -> None:
    """ddp_spawn runs only fit() in its new processes; the trial is built before that."""
    with pytest.raises(NotImplementedError, match="strategy='ddp'"):
        with pytorch.init(accelerator="cpu", devices=2, strategy="ddp_spawn"):
            pass


def test_one_device_starts_nothing() -> None:
    with pytorch.init(accelerator="cpu", devices=1) as context:
        assert context.distributed.get_size() == 1
        assert str(context.device) == "cpu"
        assert context.engine.launch_options == LaunchOptions(accelerator="cpu", devices=1)
