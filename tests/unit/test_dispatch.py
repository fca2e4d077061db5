"""``Dispatcher``: each hook reaches every callback, in ``build_callbacks()`` order, with its
arguments; the legacy ``on_training_epoch_start()`` is called without the index, warned once."""

import logging
from typing import Any, Dict, List, Optional

import pytest

from det_lightning.pytorch import PyTorchCallback
from det_lightning.pytorch._dispatch import Dispatcher


class Recorder(PyTorchCallback):
    def __init__(self, name: str, calls: List[Any]) -> None:
        self.name, self.calls = name, calls

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self.calls.append((self.name, "startup", first_batch_idx, checkpoint_uuid))

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.calls.append((self.name, "epoch_start", epoch_idx))

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        self.calls.append((self.name, "workload_end", avg_metrics, batch_metrics))

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self.calls.append((self.name, "end", checkpoint_dir))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.calls.append((self.name, "write_end", checkpoint_dir))

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.calls.append((self.name, "upload_end", uuid))


def test_every_callback_in_order_with_the_arguments() -> None:
    calls: List[Any] = []
    hooks = Dispatcher({"b": Recorder("b", calls), "a": Recorder("a", calls)})
    hooks.on_trial_startup(3, "uuid-0")
    hooks.on_training_epoch_start(1)
    hooks.on_training_workload_end({"loss": 1.0}, [{"loss": 1.0}])
    hooks.on_checkpoint_write_end("/c/u")  # per callback: the deprecated hook, then the new one
    hooks.on_checkpoint_upload_end("u")
    hooks.on_validation_end({"loss": 0.5})  # not overridden: the default does nothing
    assert calls == [
        ("b", "startup", 3, "uuid-0"),
        ("a", "startup", 3, "uuid-0"),
        ("b", "epoch_start", 1),
        ("a", "epoch_start", 1),
        ("b", "workload_end", {"loss": 1.0}, [{"loss": 1.0}]),
        ("a", "workload_end", {"loss": 1.0}, [{"loss": 1.0}]),
        ("b", "end", "/c/u"),
        ("b", "write_end", "/c/u"),
        ("a", "end", "/c/u"),
        ("a", "write_end", "/c/u"),
        ("b", "upload_end", "u"),
        ("a", "upload_end", "u"),
    ]


def test_a_legacy_epoch_start_is_called_without_the_index_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: List[Any] = []

    class Legacy(PyTorchCallback):
        def on_training_epoch_start(self) -> None:  # type: ignore[override]  # before 0.17.8
            calls.append("legacy")

    hooks = Dispatcher({"one": Legacy(), "two": Legacy(), "new": Recorder("new", calls)})
    with caplog.at_level(logging.WARNING, logger="det_lightning.pytorch"):
        hooks.on_training_epoch_start(0)
        hooks.on_training_epoch_start(1)
    assert calls == ["legacy", "legacy", ("new", "epoch_start", 0)] + [
        "legacy",
        "legacy",
        ("new", "epoch_start", 1),
    ]
    warnings = [r.getMessage() for r in caplog.records]
    assert (
        warnings
        == [
            "Legacy.on_training_epoch_start() without parameters is deprecated since Determined "
            "0.17.8. Please add the epoch_idx parameter."
        ]
        * 2
    )  # once per callback, not once per epoch


def test_no_callbacks_calls_nothing() -> None:
    hooks = Dispatcher({})
    hooks.on_trial_shutdown()
    hooks.on_training_epoch_end(0)
