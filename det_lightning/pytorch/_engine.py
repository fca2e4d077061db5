"""``context.engine``: det_lightning's engine side of a ``PyTorchTrialContext``.

Not part of Determined's API. A trial uses the context's Determined methods; the code that runs
the trial (``pytorch/_trainer.py`` and ``det_lightning.adapters``) reads and sets the rest of the
context's state through this one object, never through the context's underscored attributes::

    init()                  launch_options = ...
    Trainer(...)            tensorboard_path = ...
    fit() starts            steps_completed = ... ; epoch_len = ... ; scaler, auto_amp = ...
    on_fit_start            start_training(backend)        # no more wrap_*() from here on
    each batch              begin_batch(idx)
                            trial.train_batch(...)         # context.backward / step_optimizer
                            if should_step(): scaler.update() if auto_amp; step the LR
                                              schedulers, except after skipped_steps
    every few batches       stop_requested?                # set_stop_requested() by the trial
    fit() ends              close_tensorboard_writer()

The state itself stays on the context, under the names Determined gives it (``_scaler``,
``_aggregation_frequency``): trials written for Determined sometimes reach for them.
"""

import contextlib
import pathlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Set, Tuple

import torch

from det_lightning import errors
from det_lightning.pytorch._launch import LaunchOptions

if TYPE_CHECKING:
    from det_lightning.pytorch._context import PyTorchTrialContext


class EagerBackend:
    """Runs backward passes and optimizer steps with plain torch calls."""

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def step(self, optimizer: torch.optim.Optimizer, step_fn: Callable[[], None]) -> None:
        step_fn()

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        yield


class EngineInterface:
    """What the trainer and the adapters read and set on a context; see the module docstring.

    Args:
        context: the context this interface belongs to (``context.engine``).
    """

    def __init__(self, context: "PyTorchTrialContext") -> None:
        self._context = context

    # ----- configuration ------------------------------------------------------------------
    @property
    def hparams(self) -> Optional[Dict[str, Any]]:
        """The hyperparameters as given to ``init()`` (None: not configured), not a copy."""
        return self._context._hparams

    @property
    def exp_conf(self) -> Optional[Dict[str, Any]]:
        """The experiment configuration as given to ``init()`` (None: not configured)."""
        return self._context._exp_conf

    @property
    def launch_options(self) -> LaunchOptions:
        """Lightning's launch options (accelerator, devices, ...), set by ``init()``."""
        return self._context._launch

    @launch_options.setter
    def launch_options(self, options: LaunchOptions) -> None:
        self._context._launch = options

    @property
    def aggregation_frequency(self) -> int:
        return self._context._aggregation_frequency

    @property
    def auto_to_device(self) -> bool:
        """False after ``context.experimental.disable_auto_to_device()``."""
        return self._context.experimental._auto_to_device

    @property
    def data_repro_checks_disabled(self) -> bool:
        """True after ``context.experimental.disable_dataset_reproducibility_checks()``."""
        return self._context.experimental._data_repro_checks_disabled

    @property
    def profiler_args(self) -> Optional[Tuple[tuple, Dict[str, Any]]]:
        """The ``(args, kwargs)`` of ``context.set_profiler(...)``; None if never called."""
        return self._context._profiler_args

    # ----- mixed precision ----------------------------------------------------------------
    @property
    def scaler(self) -> Any:
        """The context's ``GradScaler`` (``wrap_scaler``, ``use_amp``, Lightning's), or None."""
        return self._context._scaler

    @scaler.setter
    def scaler(self, scaler: Any) -> None:
        self._context._scaler = scaler

    @property
    def auto_amp(self) -> bool:
        """Whether the context scales losses and steps through ``scaler`` itself (``use_amp``)."""
        return self._context.experimental._auto_amp

    @auto_amp.setter
    def auto_amp(self, auto_amp: bool) -> None:
        self._context.experimental._auto_amp = auto_amp

    # ----- where training is --------------------------------------------------------------
    @property
    def steps_completed(self) -> int:
        """Batches trained before this run (``context.get_initial_batch()``)."""
        return self._context._steps_completed

    @steps_completed.setter
    def steps_completed(self, steps: int) -> None:
        self._context._steps_completed = steps

    @property
    def epoch_len(self) -> Optional[int]:
        """Batches per epoch of the training data (None: not known yet)."""
        return self._context._epoch_len

    @epoch_len.setter
    def epoch_len(self, batches: Optional[int]) -> None:
        self._context._epoch_len = batches

    def require_epoch_len(self) -> int:
        """``epoch_len``, which the epoch questions need.

        Raises:
            InternalException: the training data is not known yet.
        """
        if self._context._epoch_len is None:
            raise errors.InternalException("Training DataLoader uninitialized.")
        return self._context._epoch_len

    def start_training(self, backend: Any) -> None:
        """From now on backward passes and steps go through ``backend``; ``wrap_*()`` refuse."""
        self._context._backend = backend
        self._context._training_started = True

    def begin_batch(self, idx: int) -> None:
        """The batch ``train_batch`` is about to see (``context.current_train_batch()``)."""
        self._context._current_batch_idx = idx

    def should_step(self) -> bool:
        """Whether this batch ends an ``aggregation_frequency`` window (optimizers step).

        Raises:
            InternalException: no batch has begun.
        """
        idx = self._context._current_batch_idx
        if idx is None:
            raise errors.InternalException("Training hasn't started.")
        return (idx + 1) % self._context._aggregation_frequency == 0

    @property
    def skipped_steps(self) -> Set[int]:
        """``id``s of the optimizers whose ``GradScaler`` skipped this batch's step; the
        engine clears it once the LR schedulers have been stepped."""
        return self._context._skipped_steps

    @property
    def stop_requested(self) -> bool:
        """``context.set_stop_requested(True)`` was called (and not undone)."""
        return self._context._stop_requested

    # ----- TensorBoard --------------------------------------------------------------------
    @property
    def tensorboard_path(self) -> Optional[pathlib.Path]:
        """The TensorBoard run's directory (None until ``Trainer.fit()`` chooses it)."""
        return self._context._tensorboard_path

    @tensorboard_path.setter
    def tensorboard_path(self, path: Optional[pathlib.Path]) -> None:
        self._context._tensorboard_path = path

    def new_tensorboard_writer(self) -> Any:
        """A writer into this trial's TensorBoard run; its file opens at the first write, in the
        directory ``Trainer(...)`` chose by then (the trial may ask for it in ``__init__``)."""
        from det_lightning.pytorch._tensorboard import TrialSummaryWriter

        return TrialSummaryWriter(self._context.get_tensorboard_path)

    def close_tensorboard_writer(self) -> None:
        """Closes ``context.get_tensorboard_writer()``'s writer; the next call makes a new one."""
        if self._context._tbd_writer is not None:
            self._context._tbd_writer.close()
            self._context._tbd_writer = None
