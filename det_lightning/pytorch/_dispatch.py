"""``Dispatcher``: the one place that calls a ``PyTorchCallback`` hook on every callback of a
trial, in ``build_callbacks()``'s order, as Determined does (and Composer's ``Engine.run_event``
for its callbacks). Callers name the hook as a method, so its arguments are type-checked; when
each is called is ``_callback.py``'s pseudocode. Only ``on_training_epoch_start`` adapts a
signature (the one Determined accepted before 0.17.8)."""

import inspect
import logging
from typing import Any, Dict, List, Mapping, Optional, Set

from det_lightning.pytorch._callback import PyTorchCallback

logger = logging.getLogger("det_lightning.pytorch")


class Dispatcher:
    """Calls each hook on every callback of ``callbacks``, in order.

    Args:
        callbacks: the trial's ``build_callbacks()`` result.

    >>> calls = []
    >>> class Log(PyTorchCallback):
    ...     def on_validation_end(self, metrics): calls.append(metrics["loss"])
    >>> Dispatcher({"a": Log(), "b": Log()}).on_validation_end({"loss": 1.0})
    >>> calls
    [1.0, 1.0]
    """

    def __init__(self, callbacks: Mapping[str, PyTorchCallback]) -> None:
        self.callbacks = callbacks
        self._warned: Set[int] = set()  # ids of callbacks warned about a deprecated signature

    def _call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for callback in self.callbacks.values():
            getattr(callback, hook)(*args, **kwargs)

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self._call("on_trial_startup", first_batch_idx, checkpoint_uuid)

    def on_trial_shutdown(self) -> None:
        self._call("on_trial_shutdown")

    def on_training_start(self) -> None:
        self._call("on_training_start")

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        for callback in self.callbacks.values():
            self._epoch_start(callback, epoch_idx)

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self._call("on_training_epoch_end", epoch_idx)

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        self._call("on_training_workload_end", avg_metrics=avg_metrics, batch_metrics=batch_metrics)

    def on_validation_start(self) -> None:
        self._call("on_validation_start")

    def on_validation_epoch_start(self) -> None:
        self._call("on_validation_epoch_start")

    def on_validation_epoch_end(self, outputs: List[Any]) -> None:
        self._call("on_validation_epoch_end", outputs)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self._call("on_validation_end", metrics)

    def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
        self._call("on_checkpoint_load_start", checkpoint)

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        self._call("on_checkpoint_save_start", checkpoint)

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """``on_checkpoint_end`` (deprecated in Determined) then ``on_checkpoint_write_end``,
        per callback, as Determined calls them."""
        for callback in self.callbacks.values():
            callback.on_checkpoint_end(checkpoint_dir)
            callback.on_checkpoint_write_end(checkpoint_dir)

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self._call("on_checkpoint_upload_end", uuid=uuid)

    def _epoch_start(self, callback: PyTorchCallback, epoch_idx: int) -> None:
        """``on_training_epoch_start(epoch_idx)``, or ``()`` for the signature Determined
        accepted before 0.17.8 (as Determined still does, with a deprecation warning: once per
        callback here)."""
        hook = callback.on_training_epoch_start
        try:
            takes_index = bool(inspect.signature(hook).parameters)
        except (TypeError, ValueError):  # a builtin or C callable: assume today's signature
            takes_index = True
        if takes_index:
            hook(epoch_idx)
            return
        if id(callback) not in self._warned:
            self._warned.add(id(callback))
            logger.warning(
                f"{type(callback).__name__}.on_training_epoch_start() without parameters is "
                "deprecated since Determined 0.17.8. Please add the epoch_idx parameter."
            )
        hook()  # type: ignore[call-arg]
