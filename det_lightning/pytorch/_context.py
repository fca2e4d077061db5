"""``PyTorchTrialContext``: what a trial uses to wrap its objects and step its optimizers.

The context decides *what* happens (gradient averaging for ``aggregation_frequency``, clipping,
scaler use, zeroing); a backend object decides *how* a backward pass and an optimizer step run.
The default backend calls torch directly; under the trainer, ``det_lightning.adapters`` installs
one that goes through Lightning (``manual_backward``, ``LightningOptimizer.step``), so precision
and strategy plugins apply. Tests fake the backend. The configuration getters live in the base
class (``det_lightning/_trial_context.py``), as in Determined; the state the context shares with
the code that runs the trial is ``context.engine`` (``_engine_state.py``), which the context owns.
"""

import logging
import pathlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Type, Union

import torch
from torch import nn

from det_lightning import errors
from det_lightning._trial_context import NOT_CONFIGURED, TrialContext
from det_lightning.core import DistributedContext
from det_lightning.pytorch._context_attributes import DeterminedAttributes
from det_lightning.pytorch._data import _Data
from det_lightning.pytorch._engine_state import EngineState
from det_lightning.pytorch._experimental import PyTorchExperimentalContext
from det_lightning.pytorch._lr_scheduler import LRScheduler
from det_lightning.pytorch._reducer import MetricReducer, ReducerRegistry
from det_lightning.pytorch._to_device import copy_options, move_to_device

logger = logging.getLogger("det_lightning.pytorch")


def calculate_batch_sizes(hparams: Dict[str, Any], slots: int) -> "tuple[int, int]":
    """Per-slot and effective global batch size from ``hparams["global_batch_size"]``."""
    global_batch_size = int(hparams["global_batch_size"])
    if global_batch_size < slots:
        raise errors.InvalidExperimentException(
            f"global_batch_size={global_batch_size} is smaller than the number of processes "
            f"({slots}): set the global_batch_size hyperparameter to at least {slots}."
        )
    per_slot = global_batch_size // slots
    if per_slot * slots != global_batch_size:
        logger.warning(
            f"global_batch_size={global_batch_size} is not divisible by the {slots} processes; "
            f"using an effective global batch size of {per_slot * slots}."
        )
    return per_slot, per_slot * slots


class PyTorchTrialContext(DeterminedAttributes, TrialContext):
    """Created by ``det_lightning.pytorch.init()``; see Determined's documentation of the same name.

    Args:
        hparams: the trial's hyperparameters.
        exp_conf: the experiment configuration, if any.
        distributed: this process's rank information.
        aggregation_frequency: step the optimizers every this many batches.
        enable_tensorboard_logging: write metrics to TensorBoard.
        trial_seed: the configured seed, if any (``get_trial_seed()``).
        steps_completed: batches already trained when resuming (``get_initial_batch()``).
        device: where ``wrap_model`` puts models and ``to_device`` puts batches.
        tensorboard_path: directory of the TensorBoard run.
    """

    def __init__(
        self,
        hparams: Optional[Dict[str, Any]] = None,
        exp_conf: Optional[Dict[str, Any]] = None,
        distributed: Optional[DistributedContext] = None,
        aggregation_frequency: int = 1,
        *,
        enable_tensorboard_logging: bool = True,
        trial_seed: Optional[int] = None,
        steps_completed: int = 0,
        device: Optional[torch.device] = None,
        tensorboard_path: Optional[pathlib.Path] = None,
    ) -> None:
        if not isinstance(aggregation_frequency, int) or aggregation_frequency < 1:
            raise ValueError(
                f"init(aggregation_frequency={aggregation_frequency!r}): expected an int >= 1."
            )
        self.engine = EngineState(
            hparams=hparams,
            exp_conf=exp_conf,
            aggregation_frequency=aggregation_frequency,
            tensorboard_path=tensorboard_path,
        )
        super().__init__(
            hparams, exp_conf, distributed, trial_seed, steps_completed=steps_completed
        )
        self._reducers = ReducerRegistry(self.distributed.allgather)
        self._aggregation_frequency = aggregation_frequency
        self._enable_tensorboard_logging = enable_tensorboard_logging
        self.device = device or torch.device("cpu")
        self._per_slot_batch_size: Optional[int] = None
        self._global_batch_size: Optional[int] = None
        if hparams and hparams.get("global_batch_size") is not None:
            self._per_slot_batch_size, self._global_batch_size = calculate_batch_sizes(
                hparams, self.distributed.size
            )
        self.models: List[nn.Module] = []
        self.optimizers: List[torch.optim.Optimizer] = []
        self.lr_schedulers: List[LRScheduler] = []
        self.profiler: Any = None
        self.experimental = PyTorchExperimentalContext(self)
        self._optimizer_configs: Dict[torch.optim.Optimizer, Dict[str, Any]] = {}
        self._to_device_warned_types: Set[Type] = set()

    # ----- configuration --------------------------------------------------------------------
    def get_global_batch_size(self) -> int:
        if self._global_batch_size is None:
            raise ValueError(
                "global_batch_size "
                + NOT_CONFIGURED.format(what="hparams['global_batch_size']", arg="hparams")
            )
        return self._global_batch_size

    def get_per_slot_batch_size(self) -> int:
        if self._per_slot_batch_size is None:
            raise ValueError(
                "per_slot_batch_size "
                + NOT_CONFIGURED.format(what="hparams['global_batch_size']", arg="hparams")
            )
        return self._per_slot_batch_size

    def get_enable_tensorboard_logging(self) -> bool:
        return self._enable_tensorboard_logging

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        if not isinstance(enable_tensorboard_logging, bool):
            raise TypeError("enable_tensorboard_logging must be a boolean")
        self._enable_tensorboard_logging = enable_tensorboard_logging

    def get_tensorboard_path(self) -> pathlib.Path:
        return self.engine.require_tensorboard_path()

    def get_tensorboard_writer(self) -> Any:
        """A ``SummaryWriter`` on the same run directory the trainer's metrics go to."""
        engine = self.engine
        if engine.tensorboard_writer is None:
            engine.tensorboard_writer = engine.new_tensorboard_writer()
        return engine.tensorboard_writer

    # ----- wrapping -------------------------------------------------------------------------
    def _check_not_training(self, call: str) -> None:
        if self.engine.training_started:
            raise errors.InvalidExperimentException(
                f"{call} was called after training started. Wrap models, optimizers, schedulers "
                "and scalers in the trial's __init__(), before Trainer.fit()."
            )

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Moves ``model`` to the device and registers it for checkpoints and train/eval modes.

        Returns the same module: under several processes Lightning's strategy wraps the whole
        trial (DDP), so gradients are synchronized without a per-model wrapper.
        """
        self._check_not_training("wrap_model()")
        if not isinstance(model, nn.Module):
            raise TypeError(f"wrap_model() expects a torch.nn.Module, got {type(model).__name__}.")
        model = model.to(self.device)
        if self.engine.auto_amp:
            model = self.autocast_forward_pass(model)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        backward_passes_per_step: int = 1,
        fp16_compression: Optional[bool] = None,
        average_aggregated_gradients: Optional[bool] = None,
    ) -> torch.optim.Optimizer:
        """Registers ``optimizer``; step it with ``step_optimizer``.

        Args:
            optimizer: a torch optimizer over wrapped models' parameters.
            backward_passes_per_step: Horovod's knob; must be 1 here.
            fp16_compression: Horovod's knob; ignored.
            average_aggregated_gradients: divide accumulated gradients by
                ``aggregation_frequency`` before stepping (default True).
        """
        self._check_not_training("wrap_optimizer()")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"wrap_optimizer() expects a torch.optim.Optimizer, got {type(optimizer).__name__}."
            )
        if backward_passes_per_step < 1:
            raise errors.InvalidExperimentException(
                "backward_passes_per_step for local gradient aggregation must be >= 1; got "
                f"{backward_passes_per_step}."
            )
        if average_aggregated_gradients is None:
            average_aggregated_gradients = True
        self._optimizer_configs[optimizer] = {
            "average_aggregated_gradients": bool(average_aggregated_gradients)
        }
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
    ) -> Any:
        """Registers ``lr_scheduler``; the trainer steps it according to ``step_mode``."""
        self._check_not_training("wrap_lr_scheduler()")
        if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and (
            step_mode is not LRScheduler.StepMode.MANUAL_STEP
        ):
            raise errors.InvalidExperimentException(
                "wrap_lr_scheduler() got a ReduceLROnPlateau, which steps on a metric: use "
                "step_mode=LRScheduler.StepMode.MANUAL_STEP and step it yourself, e.g. in a "
                "PyTorchCallback's on_validation_end(metrics)."
            )
        optimizer = getattr(lr_scheduler, "optimizer", None)
        if optimizer is not None and optimizer not in self._optimizer_configs:
            raise errors.InvalidExperimentException(
                "Must use an optimizer that is returned by wrap_optimizer(): the scheduler's "
                "optimizer was never wrapped."
            )
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """Registers a ``torch.amp.GradScaler``; its state goes into checkpoints."""
        self._check_not_training("wrap_scaler()")
        if self.engine.scaler is not None:
            raise errors.InvalidExperimentException("Please only call wrap_scaler or use_amp once.")
        if self.models:
            raise errors.InvalidExperimentException("Please call wrap_scaler before wrap_model.")
        self.engine.scaler = scaler
        return scaler

    def configure_apex_amp(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "configure_apex_amp() (NVIDIA apex) is not supported: use native mixed precision "
            "instead, either context.experimental.use_amp(), or context.wrap_scaler("
            "torch.amp.GradScaler('cuda')) with torch.autocast in train_batch, or Lightning's "
            "precision='16-mixed' / 'bf16-mixed'."
        )

    def autocast_forward_pass(self, to_wrap: nn.Module) -> nn.Module:
        """Runs ``to_wrap``'s forward under autocast and returns float32 outputs."""
        device_type = self.device.type
        dtype = torch.float16 if device_type == "cuda" else torch.bfloat16

        def autocast_hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            module._det_autocast = torch.autocast(device_type, dtype=dtype)  # type: ignore
            module._det_autocast.__enter__()  # type: ignore

        def end_hook(module: nn.Module, args: Any, kwargs: Any, output: Any) -> Any:
            module._det_autocast.__exit__(None, None, None)  # type: ignore
            return _to_float32(output)

        to_wrap.register_forward_pre_hook(autocast_hook, with_kwargs=True)
        to_wrap.register_forward_hook(end_hook, with_kwargs=True)
        return to_wrap

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """A ``torch.profiler.profile`` with these arguments, writing traces to TensorBoard."""
        self.engine.profiler_args = (args, kwargs)

    def wrap_reducer(
        self,
        reducer: Union[Callable, MetricReducer],
        name: Optional[str] = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> Any:
        return self._reducers.wrap_reducer(reducer, name, for_training, for_validation)

    def reset_reducers(self) -> None:
        self._reducers.reset_reducers()

    def reduce_metrics(self, for_training: bool) -> Dict[str, Any]:
        return self._reducers.reduce_metrics(for_training)

    def to_device(self, data: _Data) -> Any:
        device = self.device  # (to_device's body: one call less per batch)
        return move_to_device(data, device, self._to_device_warned_types, copy_options(device))

    # ----- the training step ----------------------------------------------------------------
    def backward(
        self,
        loss: torch.Tensor,
        gradient: Optional[torch.Tensor] = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """Computes gradients of ``loss``; on accumulating batches without cross-rank sync."""
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"context.backward() expects a loss tensor, got {type(loss).__name__}.")
        engine = self.engine
        if engine.scaler is not None and engine.auto_amp:
            loss = engine.scaler.scale(loss)
        kwargs: Dict[str, Any] = {"retain_graph": retain_graph, "create_graph": create_graph}
        if gradient is not None:
            kwargs["gradient"] = gradient
        if self._aggregation_frequency > 1 and not engine.should_step():
            with engine.backend.no_sync():  # accumulating: no cross-rank sync
                engine.backend.backward(loss, **kwargs)
        else:  # (no context manager to enter and leave on every batch)
            engine.backend.backward(loss, **kwargs)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Optional[Callable[[Iterator], None]] = None,
        auto_zero_grads: bool = True,
        scaler: Optional[Any] = None,
    ) -> None:
        """Steps ``optimizer`` on every ``aggregation_frequency``-th batch.

        Args:
            optimizer: an optimizer returned by ``wrap_optimizer``.
            clip_grads: called with the parameters after unscaling, before the step.
            auto_zero_grads: zero the gradients after the step.
            scaler: a ``GradScaler`` to step through (Determined's manual AMP recipe).
        """
        config = self._optimizer_configs.get(optimizer)
        if config is None:
            raise errors.InvalidExperimentException(
                f"step_optimizer() got an optimizer ({type(optimizer).__name__}) that was never "
                "wrapped. Call `self.opt = context.wrap_optimizer(opt)` in the trial's __init__ "
                "and step that object."
            )
        if self._aggregation_frequency > 1 and not auto_zero_grads:
            raise errors.InvalidExperimentException(
                "if optimizations.aggregation_frequency is larger than 1, auto_zero_grads must be "
                "set to true."
            )
        if not self.engine.should_step():
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for p in params:  # (a loop: no generator to start on every batch)
            if p.grad is not None:
                break
        else:
            if params:
                raise errors.InvalidExperimentException(
                    "step_optimizer() was called before backward(): no parameter of this optimizer "
                    "has a gradient. Call context.backward(loss) first in train_batch."
                )
        if config["average_aggregated_gradients"] and self._aggregation_frequency > 1:
            for p in params:
                if p.grad is not None:
                    p.grad.div_(float(self._aggregation_frequency))
        if scaler is None and self.engine.auto_amp:
            scaler = self.engine.scaler
        if clip_grads is not None:
            if scaler is not None:
                # Clip the true gradients, not the scaled ones (GradScaler notes).
                scaler.unscale_(optimizer)
            clip_grads(params)  # type: ignore[arg-type]
        if scaler is None:
            self.engine.backend.step(optimizer, optimizer.step)
        else:
            self._step_with_scaler(optimizer, scaler)
        if auto_zero_grads:
            self.engine.backend.zero_grad(optimizer)

    def _step_with_scaler(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        """``scaler.step(optimizer)``, noting when the scaler skips the step (inf/NaN gradients)
        so the trainer does not step that optimizer's LR schedulers for this batch either."""
        stepped: List[bool] = []
        handle = optimizer.register_step_post_hook(lambda *_: stepped.append(True))
        try:
            self.engine.backend.step(optimizer, lambda: scaler.step(optimizer))
        finally:
            handle.remove()
        if not stepped:
            self.engine.skipped_steps.add(id(optimizer))

    # ----- where training is ----------------------------------------------------------------
    def current_train_batch(self) -> int:
        return self.engine.require_batch()

    def current_train_epoch(self) -> int:
        return self.engine.require_batch() // self.engine.require_epoch_len()

    def is_epoch_start(self) -> bool:
        return self.engine.require_batch() % self.engine.require_epoch_len() == 0

    def is_epoch_end(self) -> bool:
        epoch_len = self.engine.require_epoch_len()
        return self.engine.require_batch() % epoch_len == epoch_len - 1


def _to_float32(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, dict):
        return {k: _to_float32(v) for k, v in output.items()}
    if isinstance(output, (list, tuple)):
        return type(output)(_to_float32(v) for v in output)
    return output
