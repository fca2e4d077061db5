"""Reporting a trial's metrics, as Determined's controller does, for both front ends.

training workload ends (a REPORT action, or log_every_n_steps under LightningTrial)
  TrainingReport.report(trainer)
    average the workload's per-batch metrics over batches and ranks; add the reducers'
    on_training_workload_end(avg_metrics, batch_metrics)           # every rank
    rank 0: the "training metrics" log line; Determined/<name> per batch to the loggers;
            the averages to self.log (ModelCheckpoint/EarlyStopping can monitor them)

each validation batch
  ValidationBuffer.add(...)     evaluate_batch's metrics, checked; a GPU's copied to the
                                host without waiting (TrialHooks fills it)
validation ends
  ValidationBuffer.numpy_outputs() one wait per GPU, then the pass's metrics as numpy values
  ValidationBuffer.reduce(...)  evaluate_batch outputs reduced over batches and ranks (or
                                evaluate_full_dataset's dict, broadcast from the chief), plus
                                the reducers
  log_validation_to_loggers(...) Determined/val_<name> to the loggers (rank 0)

fit() ends
  closing_summary(result, ...)  a few lines for the chief's log: what was trained, the
                                searcher metric, the checkpoint to resume from
"""

import dataclasses
import pathlib
from typing import Any, Dict, List, Optional, Set, Union

import lightning.pytorch as pl

from det_lightning.adapters import metrics as metric_utils
from det_lightning.adapters.module import TrialModule
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._result import FitResult
from det_lightning.pytorch._store import CheckpointStore
from det_lightning.pytorch._trial import PyTorchTrial

# Determined's counters: added to reported dicts, kept by Lightning itself, never self.log'ged.
COUNTERS = ("batches", "epochs")


class TrainingReport:
    """Reports the training workload that ``module`` ran since the last report.

    Args:
        module: the ``TrialModule``.
    """

    def __init__(self, module: TrialModule) -> None:
        self.module = module

    def report(self, trainer: pl.Trainer, in_loop: bool = True) -> None:
        """Averages and reports the workload (``in_loop``: during training, where Lightning
        accepts ``self.log``)."""
        module = self.module
        state = module.progress
        batches_trained = state.batches_trained
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
        module.det_hooks.on_training_workload_end(averages, batch_metrics)
        if dist.rank != 0:
            return
        module.context.engine.metrics_reported = True
        metric_utils.log_training(batches_trained, averages)
        _log_per_batch(trainer, batch_metrics, averages, first_idx)
        if not in_loop:  # after training Lightning takes no self.log; nothing monitors it then
            return
        # The counters get no self.log (each is Lightning bookkeeping).
        logged = {name: value for name, value in averages.items() if name not in COUNTERS}
        for name, value in metric_utils.host_scalars(logged).items():
            module.log(name, value, logger=False, prog_bar=(name == "loss"))


@dataclasses.dataclass
class ValidationBuffer:
    """One validation's results as they come in: ``evaluate_batch``'s per-batch metrics (with
    the keys the first batch set and the records seen), or ``evaluate_full_dataset``'s dict."""

    outputs: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    keys: Optional[Any] = None
    records: int = 0
    whole: Dict[str, Any] = dataclasses.field(default_factory=dict)
    converted: bool = False  # outputs hold numpy values (numpy_outputs ran)
    copying: Set[Any] = dataclasses.field(default_factory=set)  # GPUs with copies in flight

    def add(self, metrics: Any, records: int) -> None:
        """One ``evaluate_batch`` result, checked against the earlier batches' keys. Determined
        copies each batch's metrics to the host here and waits for the copy, which on a GPU
        waits for all queued work once per batch; the copy is queued here without waiting
        (``to_host_without_waiting``), and ``numpy_outputs`` waits once per pass."""
        self.keys = metric_utils.check_validation_output(metrics, self.keys)
        self.outputs.append(metric_utils.to_host_without_waiting(metrics, self.copying))
        self.records += records

    def numpy_outputs(self) -> List[Dict[str, Any]]:
        """The per-batch metrics as Determined has them at the end of a pass: numpy arrays
        for tensors (what ``on_validation_epoch_end`` callbacks and the reducers get)."""
        if not self.converted:
            metric_utils.wait_for_host_copies(self.copying)
            self.outputs = metric_utils.per_batch_numpy(self.outputs)
            self.converted = True
        return self.outputs

    def reduce(
        self, trial: PyTorchTrial, context: PyTorchTrialContext, per_batch: bool
    ) -> Dict[str, Any]:
        """The validation's metrics, the same on every rank (``per_batch``: ``evaluate_batch``
        ran; otherwise the chief's ``evaluate_full_dataset`` dict is broadcast)."""
        dist = context.distributed
        if per_batch:
            if dist.size == 1 and not self.outputs:
                raise RuntimeError(
                    "validation_loader is empty: build_validation_data_loader() yields no batches."
                )
            metrics = metric_utils.reduce_validation_metrics(
                self.numpy_outputs(), self.keys, trial.evaluation_reducer(), dist
            )
        else:
            metrics = dist.broadcast(self.whole)
        metrics.update(metric_utils.to_numpy(context.reduce_metrics(for_training=False)))
        return metrics


def log_validation_to_loggers(trainer: pl.Trainer, metrics: Dict[str, Any], step: int) -> None:
    """A validation's metrics to the Lightning loggers, as ``Determined/val_<name>``."""
    values = {
        ("Determined/" + (k if k.startswith("val") else "val_" + k)): v
        for k, v in metric_utils.scalars(metrics).items()
    }
    for lg in trainer.loggers:
        lg.log_metrics(values, step=step)


def _log_per_batch(
    trainer: pl.Trainer,
    batch_metrics: List[Dict[str, Any]],
    averages: Dict[str, Any],
    first_idx: int,
) -> None:
    """Per-batch training metrics at their own steps, named as Determined names them."""
    loggers = trainer.loggers
    if not loggers:
        return
    seen: Set[str] = set()
    for offset, metrics in enumerate(batch_metrics):
        values = metric_utils.scalars(metrics, prefix="Determined/")
        seen.update(metrics)
        for lg in loggers:
            lg.log_metrics(values, step=first_idx + offset)
    rest = {k: v for k, v in averages.items() if k not in seen and k not in COUNTERS}
    for lg in loggers:
        lg.log_metrics(
            metric_utils.scalars(rest, "Determined/"), step=first_idx + len(batch_metrics)
        )


def closing_summary(
    result: FitResult,
    metric: str,
    smaller_is_better: bool,
    resume_from: Union[CheckpointStore, pathlib.Path, None],
) -> List[str]:
    """The lines that close a ``fit()``: what was trained, ``metric`` (the searcher metric), and
    the checkpoint to resume from.

    >>> import pathlib
    >>> done = FitResult(64, ({"validation_loss": 0.31}, {"validation_loss": 0.26050577}),
    ...                  pathlib.Path("ck"), epochs_trained=1, seconds=7.84)
    >>> print("\\n".join(closing_summary(done, "validation_loss", True, pathlib.Path("ck/a1"))))
    fit() done: 64 batches, 1 epoch, in 7.8 s
    validation_loss: last 0.2605, best 0.2605 (smaller is better)
    resume from: ck/a1
    >>> early = FitResult(1, (), pathlib.Path("ck"), stopped_early=True, seconds=0.5)
    >>> print("\\n".join(closing_summary(early, "accuracy", False, None)))
    fit() stopped early: 1 batch, 0 epochs, in 0.5 s
    accuracy: not reported (larger is better)
    resume from: no checkpoint
    """
    ended = "stopped early" if result.stopped_early else "done"
    last, best = result.last_metric(metric), result.best_metric(metric, smaller_is_better)
    direction = "smaller" if smaller_is_better else "larger"
    values = "not reported" if last is None else f"last {last:.4g}, best {best:.4g}"
    return [
        f"fit() {ended}: {_count(result.batches_trained, 'batch', 'batches')}, "
        f"{_count(result.epochs_trained, 'epoch', 'epochs')}, in {result.seconds:.1f} s",
        f"{metric}: {values} ({direction} is better)",
        f"resume from: {resume_from if resume_from is not None else 'no checkpoint'}",
    ]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
