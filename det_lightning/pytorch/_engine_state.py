"""``context.engine``: the state a ``PyTorchTrialContext`` shares with the code that runs it.

Not part of Determined's API. The trial sets its options through the context's Determined
methods (``wrap_scaler``, ``experimental.use_amp()``, ``set_profiler``, ...); the code that runs
the trial (``pytorch/_trainer.py`` and ``det_lightning.adapters``) sets where training is. Both
keep that state in this one object, which the context owns, so neither side reads the other's
underscored attributes::

    PyTorchTrialContext(...)   hparams, exp_conf, aggregation_frequency  (fixed from here on)
    init()                     launch_options = ...
    Trainer(...)               tensorboard_path = ...
    the trial's __init__       scaler, auto_amp, auto_to_device, data_repro_checks_disabled,
                               profiler_args                     (through the context's methods)
    fit() starts               steps_completed = ... ; epoch_len = ... ; scaler, auto_amp = ...
    on_fit_start               start_training(backend)        # no more wrap_*() from here on
    each batch                 begin_batch(idx)
                               trial.train_batch(...)         # context.backward / step_optimizer
                               if should_step(): scaler.update() if auto_amp; step the LR
                                                 schedulers, except after skipped_steps
    fit() ends                 close_tensorboard_writer()

Trials written for Determined sometimes reach for the context's own attributes; the context
keeps Determined's names for those (``pytorch/_context_attributes.py``).
"""

import contextlib
import dataclasses
import pathlib
from typing import Any, Callable, ContextManager, Dict, Iterator, Optional, Protocol, Set, Tuple

import torch

from det_lightning import errors
from det_lightning.pytorch._launch_options import LaunchOptions


class TrainingBackend(Protocol):
    """What runs a context's backward passes, optimizer steps and gradient zeroing
    (``EagerBackend``; under Lightning, ``det_lightning.adapters.module.LightningBackend``)."""

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None: ...

    def step(self, optimizer: torch.optim.Optimizer, step_fn: Callable[[], None]) -> None: ...

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...

    def no_sync(self) -> ContextManager[None]: ...


class EagerBackend:
    """Runs backward passes and optimizer steps with plain torch calls."""

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def step(self, optimizer: torch.optim.Optimizer, step_fn: Callable[[], None]) -> None:
        step_fn()

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        yield


@dataclasses.dataclass(eq=False)
class EngineState:
    """A context's state beyond Determined's API (``context.engine``); see the module docstring.

    Args:
        hparams: the hyperparameters as given to ``init()`` (None: not configured), not a copy.
        exp_conf: the experiment configuration as given to ``init()`` (None: not configured).
        aggregation_frequency: optimizers step every this many batches.
        launch_options: Lightning's launch options (accelerator, devices, ...), set by ``init()``.
        tensorboard_path: the TensorBoard run's directory (None until ``Trainer.fit()`` chooses).
        steps_completed: batches trained before this run (``context.get_initial_batch()``).
        epoch_len: batches per epoch of the training data (None: not known yet).
        batch_idx: the batch ``train_batch`` sees now (``context.current_train_batch()``).
        backend: runs backward passes and optimizer steps (``start_training``).
        training_started: ``wrap_*()`` refuse from now on.
        skipped_steps: ``id``s of the optimizers whose ``GradScaler`` skipped this batch's
            step; the engine clears it once the LR schedulers have been stepped.
        scaler: the context's ``GradScaler`` (``wrap_scaler``, ``use_amp``, Lightning's), or None.
        auto_amp: the context scales losses and steps through ``scaler`` itself (``use_amp``).
        auto_to_device: False after ``context.experimental.disable_auto_to_device()``.
        data_repro_checks_disabled: True after
            ``context.experimental.disable_dataset_reproducibility_checks()``.
        profiler_args: the ``(args, kwargs)`` of ``context.set_profiler(...)``; None if never
            called.
        tensorboard_writer: ``context.get_tensorboard_writer()``'s writer, once made.
        metrics_reported: the chief has reported metrics (Determined's chief makes the context's
            TensorBoard writer then, so ``context._tbd_writer`` is one from then on).
    """

    hparams: Optional[Dict[str, Any]] = None
    exp_conf: Optional[Dict[str, Any]] = None
    aggregation_frequency: int = 1
    launch_options: LaunchOptions = LaunchOptions()
    tensorboard_path: Optional[pathlib.Path] = None
    steps_completed: int = 0
    epoch_len: Optional[int] = None
    batch_idx: Optional[int] = None
    backend: TrainingBackend = dataclasses.field(default_factory=EagerBackend)
    training_started: bool = False
    skipped_steps: Set[int] = dataclasses.field(default_factory=set)
    scaler: Any = None
    auto_amp: bool = False
    auto_to_device: bool = True
    data_repro_checks_disabled: bool = False
    profiler_args: Optional[Tuple[tuple, Dict[str, Any]]] = None
    tensorboard_writer: Any = None
    metrics_reported: bool = False

    # ----- where training is --------------------------------------------------------------
    def require_epoch_len(self) -> int:
        """``epoch_len``, which the epoch questions need.

        Raises:
            InternalException: the training data is not known yet.
        """
        if self.epoch_len is None:
            raise errors.InternalException("Training DataLoader uninitialized.")
        return self.epoch_len

    def require_batch(self) -> int:
        """``batch_idx``, which the batch questions need.

        Raises:
            InternalException: no batch has begun.
        """
        if self.batch_idx is None:
            raise errors.InternalException("Training hasn't started.")
        return self.batch_idx

    def start_training(self, backend: TrainingBackend) -> None:
        """From now on backward passes and steps go through ``backend``; ``wrap_*()`` refuse."""
        self.backend = backend
        self.training_started = True

    def begin_batch(self, idx: int) -> None:
        """The batch ``train_batch`` is about to see (``context.current_train_batch()``)."""
        self.batch_idx = idx

    def should_step(self) -> bool:
        """Whether this batch ends an ``aggregation_frequency`` window (optimizers step).

        Raises:
            InternalException: no batch has begun.
        """
        idx = self.batch_idx
        if idx is None:
            raise errors.InternalException("Training hasn't started.")
        return (idx + 1) % self.aggregation_frequency == 0

    # ----- TensorBoard --------------------------------------------------------------------
    def require_tensorboard_path(self) -> pathlib.Path:
        """``tensorboard_path`` (``context.get_tensorboard_path()``).

        Raises:
            InternalException: ``Trainer(...)`` has not chosen it yet.
        """
        if self.tensorboard_path is None:
            raise errors.InternalException(
                "The TensorBoard directory is chosen when Trainer.fit() starts; call "
                "get_tensorboard_path() from the trial's methods or callbacks during training."
            )
        return self.tensorboard_path

    def new_tensorboard_writer(self) -> Any:
        """A writer into this trial's TensorBoard run; its file opens at the first write, in the
        directory ``Trainer(...)`` chose by then (the trial may ask for it in ``__init__``)."""
        from det_lightning.pytorch._tensorboard import TrialSummaryWriter

        return TrialSummaryWriter(self.require_tensorboard_path)

    def close_tensorboard_writer(self) -> None:
        """Closes ``context.get_tensorboard_writer()``'s writer; the next call makes a new one."""
        if self.tensorboard_writer is not None:
            self.tensorboard_writer.close()
            self.tensorboard_writer = None
