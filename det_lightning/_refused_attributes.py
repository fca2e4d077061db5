"""The attributes of Determined 0.38.1's classes that det_lightning refuses, and what to use.

Trials read some of Determined's private attributes (``context._epoch_len``,
``context._current_batch_idx``), so det_lightning keeps those with Determined's meaning; the
rest of what Determined's ``PyTorchTrialContext``, ``PyTorchTrial``, ``DataLoader`` and
reducers set, and the cluster-only parts of its ``ClusterInfo``, is listed here: reading one raises :class:`errors.NotProvidedAttributeError` (an
``AttributeError``, so ``hasattr()`` is False) naming the replacement.
``tests/compat/test_context_attributes_parity.py`` reads Determined's source and fails on an
attribute neither provided nor listed here.
"""

from typing import Any, Dict, NoReturn, Optional

from det_lightning.errors import NotProvidedAttributeError

_REDUCERS = "context.wrap_reducer(), context.reduce_metrics() and context.reset_reducers()"

REFUSED_ATTRIBUTES: Dict[str, str] = {
    "PyTorchTrialContext._core": (
        "there is no master to talk to: use context.distributed for ranks and collectives, "
        "context.get_tensorboard_writer() for TensorBoard, and det_lightning.core.init() "
        "(Determined's Core API in local mode) for a loop of your own"
    ),
    "PyTorchTrialContext._distributed_backend": (
        "processes are launched by `det-lightning run --devices N`, torchrun or "
        "pytorch.init(strategy=...): read ranks from context.distributed"
    ),
    "PyTorchTrialContext._allgather_fn": "use context.distributed.allgather()",
    "PyTorchTrialContext._wrapped_reducers": f"use {_REDUCERS}",
    "PyTorchTrialContext._loss_ids": (
        "it tracks losses for NVIDIA apex, which is not supported: use context.backward(loss) "
        "with native mixed precision (context.experimental.use_amp())"
    ),
    "PyTorchTrialContext._last_backward_batch_idx": (
        "use context.current_train_batch() (the batch train_batch is training)"
    ),
    "PyTorchTrialContext._last_tb_reset_ts": (
        "TensorBoard files are written locally, never uploaded: use "
        "context.get_tensorboard_writer()"
    ),
    "Context.profiler": (
        "Determined's system-metrics profiler reports to a master: profile a loop with "
        "torch.profiler, or a PyTorchTrial with Trainer(trial, context, profiler='simple')"
    ),
    "Context.experimental": (
        "its checkpoint deduplication talks to a master: use core_context.checkpoint"
    ),
    "ClusterInfo.gpu_uuids": (
        "a trial's devices are Lightning's: info.slot_ids numbers them, and "
        "torch.cuda.get_device_properties(i).uuid names one"
    ),
    **{
        f"ClusterInfo.{name}": (
            "there is no master, agent or allocation: info.trial.trial_id and "
            "info.trial.experiment_id name the trial"
        )
        for name in ("agent_id", "task_id", "allocation_id", "session_token")
    },
    "PyTorchTrial.trial_controller_class": (
        "det_lightning runs a trial with pytorch.Trainer(trial, context).fit()"
    ),
}


class RefusedAttribute:
    """A class attribute standing for a refused Determined attribute: reading it raises.

    A non-data descriptor, so a trial that assigns the attribute (as some test harnesses do
    with Determined's private fields) simply sets it on the instance.

    Args:
        owner: Determined's class name (``PyTorchTrialContext``), which keys the reason.
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.key = owner

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"{self.owner}.{name}"
        if self.key not in REFUSED_ATTRIBUTES:
            raise KeyError(f"{self.key} has no reason in REFUSED_ATTRIBUTES")

    def __get__(self, obj: Optional[Any], objtype: Optional[type] = None) -> NoReturn:
        raise NotProvidedAttributeError(
            f"{self.key} is not provided by det_lightning: {REFUSED_ATTRIBUTES[self.key]}.",
            name=self.key.rpartition(".")[2],
            obj=obj,
        )


__all__ = ["REFUSED_ATTRIBUTES", "RefusedAttribute"]
