"""``ScheduleCallback``: Determined's periods as Lightning loop decisions.

After each training batch (``on_train_batch_end``)::

    reached = schedule.reached(batches_trained)       # VALIDATE / CHECKPOINT / REPORT / TRAIN
    if reached or stop requested:
        report the workload's training metrics; on_training_workload_end(...)
        validate now   if VALIDATE (or TRAIN) and validation is not current
        checkpoint     if CHECKPOINT (or TRAIN, or stop) and not current, after any validation
        trainer.should_stop = True   if TRAIN or stop requested

Lightning asks ``epoch_loop._should_check_val_fx`` whether to validate after each batch; we
answer it, so validation runs inside Lightning's own loop (its callbacks, loggers, and metric
monitors see it) at exactly Determined's batches. Checkpoints go through
``Trainer.save_checkpoint`` (see ``checkpoint_io``).
"""

import logging
from typing import AbstractSet, Any, Dict, List, Set

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from det_lightning.adapters import internals
from det_lightning.adapters import metrics as metric_utils
from det_lightning.adapters.checkpoints import CheckpointManager
from det_lightning.pytorch._units import Boundary, Schedule

logger = logging.getLogger("det_lightning.core")

# With several processes, ranks agree whether to stop (a signal, set_stop_requested on any rank)
# every this many batches and at every period boundary, not after every batch: one agreement is
# a collective (about 1 ms on CPU, a pipeline stall on a GPU). A stop asked for at batch b takes
# effect on every rank at the next agreement point, at most this many batches later.
STOP_AGREEMENT_INTERVAL = 16


class ScheduleCallback(Callback):
    """Runs Determined's schedule for ``module`` inside a Lightning fit.

    Args:
        module: the ``TrialModule``.
        schedule: the periods.
        checkpoints: the checkpoint manager.
        step_zero_validation: validate before the first batch.
        stop_signal: ``stop_signal(local)`` returns True when this process (``local``: the
            trial called ``set_stop_requested(True)``) or, with several processes, any rank was
            asked to stop. With several processes it is a collective: every rank calls it at the
            same batches, whatever its own flag says.
    """

    def __init__(
        self,
        module: Any,
        schedule: Schedule,
        checkpoints: CheckpointManager,
        step_zero_validation: bool,
        stop_signal: Any = None,
    ) -> None:
        self.module = module
        self.schedule = schedule
        self.checkpoints = checkpoints
        self.step_zero_validation = step_zero_validation
        self.stop_signal = stop_signal or (lambda local=False: local)
        self.validate_now = False
        self.checkpoint_due = False
        self.stopped_early = False
        self.validation_history: List[Dict[str, Any]] = []

    def should_check_val(self, data_fetcher: Any = None) -> bool:
        """Replaces Lightning's ``_should_check_val_fx``."""
        return self.validate_now

    # ----- start ----------------------------------------------------------------------------
    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state = self.module.state
        for callback in self.module.det_callbacks.values():
            callback.on_training_start()
        if self.step_zero_validation and state.batches_trained == 0:
            self._run_validation_now(trainer)

    def _run_validation_now(self, trainer: pl.Trainer) -> None:
        self.validate_now = True
        internals.validate_now(trainer)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The first epoch of a resumed run is shorter; tell Lightning each epoch's length.
        internals.set_epoch_length(trainer, len(self.module.train_loader))

    # ----- after each batch -----------------------------------------------------------------
    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        module = self.module
        batches_trained = module.state.values["batches_trained"]
        reached = self.schedule.reached(batches_trained)
        stop = self._stop_agreed() if self._agree_now(batches_trained, reached) else False
        if not reached and not stop:
            return
        self._end_workload(trainer, batches_trained)
        done = Boundary.TRAIN in reached
        if done or stop:
            trainer.should_stop = True
            self.stopped_early = stop and not done
        if Boundary.VALIDATE in reached and not module.state.validation_is_current():
            # Validate first; the periodic (final, or stop) checkpoint follows it.
            self.validate_now = True
            self.checkpoint_due = done or stop or Boundary.CHECKPOINT in reached
            return
        if stop:  # a stop skips the final validation, as in Determined
            self.checkpoint_due = True
            self._after_boundaries(trainer, stop)
            return
        # Determined handles the CHECKPOINT boundary before the final validation at the end.
        self.checkpoint_due = Boundary.CHECKPOINT in reached
        self._after_boundaries(trainer, stop)
        if done and not module.state.validation_is_current():
            self.validate_now = True
            self.checkpoint_due = True

    def _end_workload(
        self, trainer: pl.Trainer, batches_trained: int, in_loop: bool = True
    ) -> None:
        module = self.module
        state = module.state
        per_batch, state.workload_metrics = state.workload_metrics, []
        first_idx = batches_trained - len(per_batch)
        dist = module.context.distributed
        averages, batch_metrics = metric_utils.average_training_metrics(per_batch, dist)
        metric_utils.check_non_finite(
            batch_metrics, first_idx, module.stop_on_nonfinite_loss, warn=dist.rank == 0
        )
        averages.update(metric_utils.to_numpy(module.context.reduce_metrics(for_training=True)))
        module.context.reset_reducers()
        # Determined adds these while reporting, to the same dict its callbacks then receive.
        averages.setdefault("batches", state.batches_trained)
        averages.setdefault("epochs", state.epochs_trained)
        for callback in module.det_callbacks.values():
            callback.on_training_workload_end(avg_metrics=averages, batch_metrics=batch_metrics)
        if dist.rank != 0:
            return
        metric_utils.log_training(batches_trained, averages)
        _log_per_batch(trainer, batch_metrics, averages, first_idx)
        if not in_loop:  # after training Lightning takes no self.log; nothing monitors it then
            return
        for name, value in metric_utils.scalars(averages).items():
            if name in ("batches", "epochs"):
                # Determined's counters, which Lightning keeps itself; each self.log costs ~1 ms
                # (benchmarks/README.md).
                continue
            module.log(name, value, logger=False, prog_bar=(name == "loss"))

    def _agree_now(self, batches_trained: int, reached: AbstractSet[Boundary]) -> bool:
        """Whether this batch is a stop-agreement point: every batch with one process (no
        collective is involved), else every ``STOP_AGREEMENT_INTERVAL`` batches and at every
        period boundary. The answer is the same on every rank, so all take part together."""
        if self.module.context.distributed.size == 1:
            return True
        return bool(reached) or batches_trained % STOP_AGREEMENT_INTERVAL == 0

    def _stop_agreed(self) -> bool:
        # Never short-circuit on the local flag: a rank that skipped the agreement would leave
        # the others waiting in it forever.
        return bool(self.stop_signal(self.module.context._stop_requested))

    def _after_boundaries(self, trainer: pl.Trainer, stop: "bool | None" = None) -> None:
        """Checkpoint if due (after any validation at this batch), then stop if asked
        (``stop``: already agreed at this batch; None: agree now, after a validation)."""
        module = self.module
        if self._stop_agreed() if stop is None else stop:
            self.checkpoint_due = True
            trainer.should_stop = True
        if self.checkpoint_due and not module.state.checkpoint_is_current():
            self.checkpoints.save(trainer)
        self.checkpoint_due = False

    # ----- validation -----------------------------------------------------------------------
    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        module = self.module
        module.context.reset_reducers()
        module.val_outputs, module.val_keys, module.val_records = [], None, 0
        module.val_metrics = {}
        for callback in module.det_callbacks.values():
            callback.on_validation_start()

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.module._evaluate_batch:
            for callback in self.module.det_callbacks.values():
                callback.on_validation_epoch_start()

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        module = self.module
        if module._evaluate_batch:
            for callback in module.det_callbacks.values():
                callback.on_validation_epoch_end(module.val_outputs)
        metrics = self._reduce_validation()
        module.val_metrics = metrics
        for name, value in metric_utils.scalars(metrics).items():
            module.log(name, value, logger=False, sync_dist=False)

    def _reduce_validation(self) -> Dict[str, Any]:
        module = self.module
        dist = module.context.distributed
        if module._evaluate_batch:
            if dist.size == 1 and not module.val_outputs:
                raise RuntimeError(
                    "validation_loader is empty: build_validation_data_loader() yields no batches."
                )
            metrics = metric_utils.reduce_validation_metrics(
                module.val_outputs, module.val_keys, module.trial.evaluation_reducer(), dist
            )
        else:
            metrics = dist.broadcast(module.val_metrics)
        metrics.update(metric_utils.to_numpy(module.context.reduce_metrics(for_training=False)))
        return metrics

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        module = self.module
        state = module.state
        metrics = module.val_metrics
        for callback in module.det_callbacks.values():
            callback.on_validation_end(metrics)
        module.context.reset_reducers()  # the next training workload starts fresh, as Determined's
        state.values["last_val"] = state.batches_trained
        self.validate_now = False
        dist = module.context.distributed
        if dist.rank == 0:
            _log_validation(trainer, metrics, state.batches_trained)
            # Determined's chief adds these while reporting, to the very dict its callbacks got
            # (a callback that kept it sees them).
            metrics.setdefault("batches", state.batches_trained)
            metrics.setdefault("epochs", state.epochs_trained)
            metric_utils.log_validation(state.batches_trained, metrics)
        self.validation_history.append(dict(metrics))
        wants = self.checkpoints.wants_checkpoint_after_validation(metrics)
        if dist.broadcast(wants) and not state.checkpoint_is_current():
            self.checkpoints.save(trainer)
        if not trainer.sanity_checking:
            self._after_boundaries(trainer)

    # ----- end ------------------------------------------------------------------------------
    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Training can end through a Lightning callback (EarlyStopping) too: report the batches
        # trained since the last period and leave a checkpoint of the final weights.
        state = self.module.state
        if state.workload_metrics:
            self._end_workload(trainer, state.batches_trained, in_loop=False)
        if state.batches_trained > 0 and not state.checkpoint_is_current():
            self.checkpoints.save(trainer)


def _log_per_batch(
    trainer: pl.Trainer, batch_metrics: List[Dict[str, Any]], averages: Dict[str, Any],
    first_idx: int,
) -> None:
    """Per-batch training metrics at their own steps, named as Determined names them."""
    if not trainer.loggers:
        return
    seen: Set[str] = set()
    for offset, metrics in enumerate(batch_metrics):
        values = metric_utils.scalars(metrics, prefix="Determined/")
        seen.update(metrics)
        for lg in trainer.loggers:
            lg.log_metrics(values, step=first_idx + offset)
    rest = {k: v for k, v in averages.items() if k not in seen and k not in ("batches", "epochs")}
    for lg in trainer.loggers:
        lg.log_metrics(metric_utils.scalars(rest, "Determined/"), step=first_idx + len(batch_metrics))


def _log_validation(trainer: pl.Trainer, metrics: Dict[str, Any], step: int) -> None:
    values = {
        ("Determined/" + (k if k.startswith("val") else "val_" + k)): v
        for k, v in metric_utils.scalars(metrics).items()
    }
    for lg in trainer.loggers:
        lg.log_metrics(values, step=step)
