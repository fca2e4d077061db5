"""``TrialModule``: a ``LightningModule`` (manual optimization) that runs a ``PyTorchTrial``.

``training_step`` is Determined's per-batch body; ``validation_step`` calls ``evaluate_batch``
(or ``evaluate_full_dataset`` once, on the chief) and returns its metrics, which
``callbacks.TrialHooks`` collects and reduces. What happens *between* batches (periods,
validation, checkpoints, stopping) is ``schedule.ScheduleCallback``'s job. What the module runs
comes in one ``TrialSetup``; the engine hands it the data and the objects it makes later through
the module's methods (``use_data``, ``set_trace_profiler``, ...), never by setting its
attributes. The epoch length is ``context.engine.epoch_len``'s, read there.

What Lightning does between two ``train_batch`` calls, against what Determined does there
(audited for Lightning 2.6; a difference is fixed here or where named)::

    validation inside the training loop
      on_validation_model_zero_grad  zeroes every gradient   -> a no-op here: Determined never
                                     (an aggregation window  touches gradients around a
                                     would lose its batches)  validation
      on_validation_model_eval       trainer.model.eval()    same as Determined's model.eval()
                                                             on each wrapped model
      validation under inference_mode                        no_grad, as Determined
                                                             (trainer_args: inference_mode=False)
      on_validation_model_train      restores the modes      Determined calls model.train() when
                                     captured before         training restarts; so does
                                                             training_step (and on_fit_start)
      val dataloader iterator        one torch draw (seed),  the same draw in Determined's
                                     made before Lightning's iter(validation_loader), after
                                     validation hooks        on_validation_(epoch_)start: the
                                                             loader is data.HooksFirst, which
                                                             runs those hooks first
      sanity check                   validates before fit    off (num_sanity_val_steps=0)
    optimizers and LR schedulers     manual optimization: Lightning steps, zeroes and schedules
                                     nothing itself (configure_optimizers returns no scheduler)
    RNG                              nothing drawn besides the loader iterators above; the draws of
                                     dropout, shuffles and per-item augmentation around a
                                     validation come in Determined's order (pinned by
                                     tests/compat/test_between_batches_parity.py); checkpoints
                                     save and restore the generators (stateful.py)
    between epochs                   Lightning's epoch hooks move no state we train with
"""

import dataclasses
import inspect
from typing import Any, Callable, Dict, Optional, Set

import lightning.pytorch as pl
import torch
from typing_extensions import override

from det_lightning.adapters import gloo_loop
from det_lightning.adapters import metrics as metric_utils
from det_lightning.adapters.lightning import internals, lean_step
from det_lightning.adapters.precision import scheduler_waits
from det_lightning.adapters.profiler_labels import LabelFree
from det_lightning.adapters.trial_state import TrialProgress
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._dispatch import Dispatcher
from det_lightning.pytorch._lr_scheduler import due_steps
from det_lightning.pytorch._trial import PyTorchTrial, is_overridden


@dataclasses.dataclass(frozen=True)
class TrialSetup:
    """What a ``TrialModule`` runs.

    Args:
        trial: the user's trial.
        context: the context the trial was built with.
        hooks: the trial's ``build_callbacks()`` result, behind the fit's one ``Dispatcher``.
        progress: how far the trial has trained (fresh or restored).
        stop_on_nonfinite_loss: ``Trainer(stop_on_nonfinite_loss=...)``; None: the environment
            decides (``metrics.stop_on_non_finite``).
    """

    trial: PyTorchTrial
    context: PyTorchTrialContext
    hooks: Dispatcher
    progress: TrialProgress
    stop_on_nonfinite_loss: Optional[bool] = None


class LightningBackend:
    """Backward passes and optimizer steps through Lightning (precision and strategy apply)."""

    def __init__(self, module: "TrialModule") -> None:
        self._module = module
        self._lightning_optimizers: Dict[int, Any] = {}
        self._fast: Optional[lean_step.BackendFastPath] = None
        self._labels = LabelFree(allowed=False)  # (bind_optimizers decides, once per fit)

    def bind_optimizers(self) -> None:
        optimizers = self._module.optimizers(use_pl_optimizer=True)
        if not isinstance(optimizers, list):
            optimizers = [optimizers]
        self._lightning_optimizers = {id(o.optimizer): o for o in optimizers}
        trainer = self._module.trainer
        self._labels = LabelFree()
        self._fast = (
            lean_step.BackendFastPath(trainer, self._labels)
            if lean_step.BackendFastPath.applies(trainer)
            else None
        )
        # context.backward calls the fast path's backward straight (it takes gradient= as a
        # keyword, as loss.backward does): one call less per batch.
        if self._fast is not None:
            vars(self)["backward"] = self._fast.backward
        else:
            vars(self).pop("backward", None)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Lightning's ``manual_backward`` (``bind_optimizers`` puts the fast path's in its
        place where that applies)."""
        gradient = kwargs.pop("gradient", None)
        args = (gradient,) if gradient is not None else ()
        self._module.manual_backward(loss, *args, **kwargs)

    def step(self, optimizer: torch.optim.Optimizer, step_fn: Any) -> None:
        lightning_optimizer = self._lightning_optimizers[id(optimizer)]
        if step_fn == optimizer.step:
            if self._fast is not None:
                self._fast.step(lightning_optimizer)
            else:
                lightning_optimizer.step()
            return
        # A GradScaler steps the optimizer itself; keep Lightning's step counting around it.
        internals.count_optimizer_step(lightning_optimizer, step_fn)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.zero_grad()``, without torch's profiler label while no profiler records."""
        self._labels.zero_grad(optimizer)

    def no_sync(self) -> Any:
        return self._module._no_sync()


class TrialModule(pl.LightningModule):
    """Runs a ``PyTorchTrial`` under a Lightning ``Trainer``.

    Args:
        setup: the trial, its context, callbacks and progress.
    """

    def __init__(self, setup: TrialSetup) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.bind_trial(setup)

    def bind_trial(self, setup: TrialSetup) -> None:
        """Attaches the trial (``LightningTrial`` builds it later, in ``setup()``)."""
        self.trial = setup.trial
        self.context = setup.context
        self.det_hooks = setup.hooks  # calls a hook on every callback
        self.det_callbacks = setup.hooks.callbacks
        self.progress = setup.progress
        # Off by default (Determined and Lightning train on); Trainer(stop_on_nonfinite_loss=...)
        # or the environment turns it on.
        self.stop_on_nonfinite_loss = metric_utils.stop_on_non_finite(setup.stop_on_nonfinite_loss)
        self.wrapped_models = torch.nn.ModuleList(self.context.models)
        self.train_loader: Any = None
        self.val_loader: Any = None
        # evaluate_batch per batch, or evaluate_full_dataset once (TrialHooks reads it too).
        self.evaluates_batches = is_overridden(self.trial, "evaluate_batch")
        self.batch_records = 0  # get_batch_length of the batch validation_step last evaluated
        self._backend = LightningBackend(self)
        self._auto_to_device = self.context.engine.auto_to_device
        self._eval_takes_idx = _accepts_batch_idx(self.trial.evaluate_batch)
        self._profiler: Optional[torch.profiler.profile] = None
        self._amp_scaler: Any = None  # the GradScaler to update after each step (use_amp)
        self._skipped_steps: Set[int] = set()
        # The Determined state every Lightning checkpoint carries (the CheckpointManager's).
        self._checkpoint_extras: Optional[Callable[[], Dict[str, Any]]] = None

    # ----- what the engine hands over after building the module -----------------------------
    def use_data(self, train_loader: Any, val_loader: Any) -> None:
        """The loaders Lightning asks for (``train_dataloader``/``val_dataloader``)."""
        self.train_loader, self.val_loader = train_loader, val_loader

    def set_trace_profiler(self, profiler: Optional[torch.profiler.profile]) -> None:
        """``context.set_profiler``'s profiler, stepped after each batch (None: none)."""
        self._profiler = profiler

    def set_checkpoint_extras(self, extras: Callable[[], Dict[str, Any]]) -> None:
        """What ``on_save_checkpoint`` adds to every Lightning checkpoint."""
        self._checkpoint_extras = extras

    # ----- Lightning plumbing ---------------------------------------------------------------
    @override
    def configure_optimizers(self) -> Any:
        return list(self.context.optimizers)

    @override
    def train_dataloader(self) -> Any:
        return self.train_loader

    @override
    def val_dataloader(self) -> Any:
        return self.val_loader

    @override
    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        # The context moves batches (honouring disable_auto_to_device), as Determined does.
        return batch

    @override
    def on_fit_start(self) -> None:
        if self.trainer.world_size > 1:  # the process group is up: its gloo socket threads
            gloo_loop.lower_loop_priority()
        self._set_train_mode()
        self._backend.bind_optimizers()
        engine = self.context.engine
        engine.start_training(self._backend)
        # Fixed from here on (wrap_scaler() refuses once training started; use_amp() comes
        # before wrap_model()): read once rather than through the engine after every batch.
        self._amp_scaler = engine.scaler if engine.auto_amp else None
        self._skipped_steps = engine.skipped_steps

    @override
    def on_validation_model_zero_grad(self) -> None:
        """Keeps the gradients: a validation may fall inside an aggregation window, and
        Determined's validation leaves them alone (Lightning's default zeroes them)."""

    def _set_train_mode(self) -> None:
        # Determined calls model.train() on each wrapped model whenever training (re)starts
        # after a boundary, undoing any eval() the trial did; Lightning restores old modes.
        for model in self.context.models:
            model.train()

    def _no_sync(self) -> Any:
        strategy = self.trainer.strategy
        model = getattr(strategy, "model", None)
        if model is not None and hasattr(model, "no_sync") and self.trainer.world_size > 1:
            return model.no_sync()
        import contextlib

        return contextlib.nullcontext()

    # ----- training -------------------------------------------------------------------------
    @override
    def training_step(self, batch: Any, batch_idx: int) -> None:
        context, progress = self.context, self.progress
        engine = context.engine
        idx = progress.batches_trained
        epoch_len = engine.epoch_len or 1  # 1: a LightningTrial's loader of unknown length
        epoch_idx, in_epoch = divmod(idx, epoch_len)
        engine.begin_batch(idx)
        if not progress.workload_metrics:  # the first batch after a boundary
            self._set_train_mode()
        if in_epoch == 0:
            self.det_hooks.on_training_epoch_start(epoch_idx)
        if self._auto_to_device:
            batch = context.to_device(batch)
        output = self.trial.train_batch(batch=batch, epoch_idx=epoch_idx, batch_idx=idx)
        if self._profiler is not None:  # set_profiler's; profiler.TraceProfiler runs it
            self._profiler.step()
        stepped = engine.should_step()
        if stepped and self._amp_scaler is not None:
            self._amp_scaler.update()
        progress.workload_metrics.append(metric_utils.check_training_output(output, idx))
        if stepped and (self._skipped_steps or self.context.lr_schedulers):
            self._step_lr_schedulers(idx, epoch_len)
        progress.batches_trained = idx + 1
        if in_epoch == epoch_len - 1:
            self.det_hooks.on_training_epoch_end(epoch_idx)
            progress.epochs_trained += 1

    def _step_lr_schedulers(self, idx: int, epoch_len: int) -> None:
        skipped = self._skipped_steps
        for scheduler in self.context.lr_schedulers:
            if skipped and scheduler_waits(scheduler, skipped):
                continue
            for _ in range(
                due_steps(
                    scheduler._step_mode,
                    scheduler._frequency,
                    idx,
                    self.context.engine.aggregation_frequency,
                    epoch_len=epoch_len,
                )
            ):
                scheduler.step()
        skipped.clear()

    # ----- validation -----------------------------------------------------------------------
    @override
    def validation_step(self, batch: Any, batch_idx: int) -> Optional[Dict[str, Any]]:
        """``evaluate_batch``'s metrics for this batch, or ``evaluate_full_dataset``'s for the
        whole loader (None on a non-chief rank, which evaluates nothing); Lightning hands them
        to ``TrialHooks.on_validation_batch_end``."""
        if not self.evaluates_batches:
            return None if batch is None else self._evaluate_full_dataset(batch)
        if self._auto_to_device:
            batch = self.context.to_device(batch)
        # As Determined: counted on the batch evaluate_batch gets, before it runs (it may
        # consume the batch); TrialHooks reads it with the metrics. A plain int attribute:
        # stored as nn.Module.__setattr__ would, without its search of the parameter, buffer
        # and submodule tables (13 calls a batch).
        vars(self)["batch_records"] = self.trial.get_batch_length(batch)
        if self._eval_takes_idx:
            return self.trial.evaluate_batch(batch=batch, batch_idx=batch_idx)
        return self.trial.evaluate_batch(batch=batch)  # type: ignore[call-arg]

    def _evaluate_full_dataset(self, loader: Any) -> Dict[str, Any]:
        metrics = self.trial.evaluate_full_dataset(data_loader=loader)
        if not isinstance(metrics, dict):
            raise TypeError(
                "evaluate_full_dataset() must return a dict of metric names to values, got "
                f"{type(metrics).__name__}."
            )
        return metric_utils.to_numpy(dict(metrics))

    @override
    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        checkpoint[ckpt.LIGHTNING_TRIAL_STATE_KEY] = self.progress.trial_state()
        if self._checkpoint_extras is not None:
            checkpoint.update(self._checkpoint_extras())


def _accepts_batch_idx(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return "batch_idx" in params or len(params) >= 2
