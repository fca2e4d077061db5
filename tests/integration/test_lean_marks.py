"""The lean path's facts about a module, kept out of ``TrialModule`` (issue 33, item 7): the
count of ``self.log`` calls (``adapters/lightning/log_count.py``) and whether the batch
transfer hands the batch back (``calls.returns_batch``), both found by the lean layer itself."""

import ast
import pathlib
from typing import Any, List

import lightning.pytorch as pl
import torch

from det_lightning.adapters.lightning import log_count
from det_lightning.adapters.lightning.calls import batch_stays, returns_batch
from det_lightning.adapters.module import TrialModule

MODULE = pathlib.Path(__file__).resolve().parents[2] / "adapters" / "module.py"


class Recording(pl.LightningModule):
    """A module whose ``log`` records the names (Lightning's needs a trainer)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: List[str] = []

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        self.seen.append(name)


def test_every_log_call_is_counted_once_installed() -> None:
    module = Recording()
    count = log_count.counter(module)
    assert count.calls == 0 and log_count.counter(module) is count  # installed once
    module.log("a", 1.0)
    module.log_dict({"b": 2.0, "c": 3.0})  # log_dict calls self.log for each
    assert (count.calls, module.seen) == (3, ["a", "b", "c"])
    assert type(Recording().__dict__.get("log")) is not log_count.LogCount  # class untouched


def test_trial_module_carries_no_lean_marker() -> None:
    """``TrialModule`` neither counts logs nor marks its transfer hook; its class body names
    nothing of the lean layer."""
    assert "log" not in vars(TrialModule)
    assert not hasattr(TrialModule, "log_calls")
    assert not hasattr(TrialModule, "keeps_batch")
    tree = ast.parse(MODULE.read_text())
    trial_module = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrialModule"
    )
    names = {n.id for n in ast.walk(trial_module) if isinstance(n, ast.Name)}
    attributes = {n.attr for n in ast.walk(trial_module) if isinstance(n, ast.Attribute)}
    assert not {"lean", "lean_step", "log_count"} & names
    assert not {"log_calls", "keeps_batch"} & attributes


def test_the_transfer_that_returns_the_batch_is_recognised() -> None:
    class Moves(pl.LightningModule):
        def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
            return batch.to(device)

    class Other(pl.LightningModule):
        def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
            return device

    assert returns_batch(TrialModule.transfer_batch_to_device)
    assert not returns_batch(pl.LightningModule.transfer_batch_to_device)
    assert not returns_batch(Moves.transfer_batch_to_device)
    assert not returns_batch(Other.transfer_batch_to_device)
    assert not returns_batch(None) and not returns_batch(len)
    strategy = pl.strategies.SingleDeviceStrategy(torch.device("cpu"))
    assert not batch_stays(Moves(), strategy)
