"""What a search's trial reports: ``SearchReporter`` records each validation on the trial's
Optuna trial and applies Determined's ASHA rule at the rungs; and how the search reads its
trials back (the trial's number, each rung's metrics, which trials count)."""

import logging
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import optuna

from det_lightning import errors
from det_lightning._runner._asha import Bracket, Decision, decide
from det_lightning._runner._lease import (
    SURPLUS,
    is_superseded,
    raise_if_taken_over,
    trial_number,
)
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._serial import deciding
from det_lightning._runner._trial_record import (
    INVALID_HP,
    RUNG,
    RUNGS,
    STOPPED,
    VALIDATION_AT,
    TrialRecord,
)
from det_lightning.pytorch import Epoch, PyTorchCallback, TrainUnit
from det_lightning.util import is_numerical_scalar

if TYPE_CHECKING:
    from det_lightning.pytorch import PyTorchTrialContext

logger = logging.getLogger("det_lightning")


class RungRecorder:
    """Records a trial's validations on its Optuna trial and applies Determined's ASHA rule at
    the rungs: what ``SearchReporter`` (a ``pytorch.Trainer``'s trial) and ``CoreReporter`` (a
    Core API loop's) share."""

    def __init__(
        self, study: optuna.Study, trial: optuna.Trial, settings: SearchSettings, bracket: Bracket
    ) -> None:
        self.study, self.trial, self.settings, self.bracket = study, trial, settings, bracket
        attrs = trial.user_attrs
        self.rungs: Dict[str, float] = dict(attrs.get(RUNGS, {}))
        self.rung = int(attrs.get(RUNG, 0))
        self.stopped = False
        self.last_value: Optional[float] = None
        self.decided_at: Optional[float] = None

    def searcher_value(self, metrics: Dict[str, Any]) -> float:
        """The searcher metric among a validation's ``metrics``.

        Raises:
            InvalidExperimentException: it is not among them.
        """
        name = self.settings.metric
        if name not in metrics:
            raise errors.InvalidExperimentException(
                f"searcher.metric {name!r} is not among the validation metrics "
                f"{sorted(metrics)}: the search cannot rank this trial. Return it from "
                "evaluate_batch (or evaluate_full_dataset), or change searcher.metric."
            )
        return float(metrics[name])

    def record(self, value: float, at: int) -> Decision:
        """Records the searcher metric ``value`` reached at ``at`` (the time metric's units)
        and returns ASHA's decision: one decision at a time in the study (``_serial``)."""
        signed = value if self.settings.smaller_is_better else -value
        raise_if_taken_over(self.trial)
        with deciding(self.study):
            others = rung_metrics(
                self.study, len(self.bracket.rung_units), exclude=trial_number(self.trial)
            )
            decision = decide(
                self.bracket.rung_units,
                others,
                self.rung,
                at,
                metric=signed,
                divisor=self.settings.divisor,
            )
            for index, recorded in decision.entered:
                self.rungs[str(index)] = recorded
            self.rung = decision.rung
            self.trial.set_user_attr(RUNGS, dict(self.rungs))
            self.trial.set_user_attr(RUNG, self.rung)
            self.decided_at = time.time()  # the decisions' order, for a replay (the drill)
        self.trial.report(value, step=at)
        self.last_value = value
        return decision

    def note_validation(
        self, batches: int, metrics: Dict[str, Any], *, lease_checked: bool = True
    ) -> None:
        """Keeps a validation's numerical metrics on the trial (its history, which the client's
        ``Trial.iter_metrics("validation")`` reads, as Determined's master kept it): after
        ``record``, which checked the lease, or with ``lease_checked=False`` checking it here
        (a worker that lost its lease writes nothing more)."""
        if not lease_checked:
            raise_if_taken_over(self.trial)
        numbers = {k: float(v) for k, v in metrics.items() if is_numerical_scalar(v)}
        record = {"metrics": numbers, "time": time.time()}
        self.trial.set_user_attr(f"{VALIDATION_AT}{int(batches)}", record)

    def ranked_out(self, decision: Decision) -> bool:
        """Whether ``decision`` stops the trial before the last rung (the full length, where
        it ends by itself)."""
        return decision.stop and decision.rung < len(self.bracket.rung_units) - 1

    def stop(self, value: float) -> None:
        """Marks the trial stopped at its rung (a resumed worker must not train it on)."""
        self.stopped = True
        self.trial.set_user_attr(STOPPED, True)
        logger.info(
            f"trial {trial_number(self.trial)}: stopped at rung {self.rung} "
            f"({self.settings.metric}={value:.6g} is not in the top of that rung)"
        )


class SearchReporter(PyTorchCallback):
    """Reports each validation to the study and stops the trial where ASHA ranks it out."""

    def __init__(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        settings: SearchSettings,
        bracket: Bracket,
        *,
        context: "PyTorchTrialContext",
        max_length: Optional[TrainUnit] = None,
    ) -> None:
        self.recorder = RungRecorder(study, trial, settings, bracket)
        self.study, self.trial, self.settings = study, trial, settings
        self.bracket, self.context = bracket, context
        self.max_length = max_length  # fit()'s: the trial ends there whatever ASHA decides

    @property
    def last_value(self) -> Optional[float]:
        return self.recorder.last_value

    @property
    def decided_at(self) -> Optional[float]:
        return self.recorder.decided_at

    def raise_if_lost(self) -> None:
        """Raises ``LeaseLost`` once another worker has taken this trial over: before a
        validation is recorded and before a checkpoint is written, so a worker that lost its
        lease writes nothing more of the trial. The trial's process asks the storage: the
        lease keeper lives in the worker's process, which kills this one once it notices."""
        raise_if_taken_over(self.trial)

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        if self.context.distributed.rank == 0:
            self.raise_if_lost()

    def _batches(self) -> int:
        try:
            return self.context.current_train_batch() + 1
        except errors.InternalException:  # a validation before the first batch
            return 0

    def _time(self) -> int:
        batches = self._batches()
        if self.settings.time_metric == "epochs":
            return batches // self.context.engine.require_epoch_len()
        return int(batches)

    def _trained_full_length(self) -> bool:
        """Whether the trial has trained its ``fit()`` length (a script may set its own)."""
        if self.max_length is None:
            return False
        batches = self._batches()
        assert isinstance(self.max_length.value, int)
        if isinstance(self.max_length, Epoch):
            return batches >= self.max_length.value * self.context.engine.require_epoch_len()
        return batches >= self.max_length.value

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        if self.context.distributed.rank != 0:
            return
        recorder = self.recorder
        value = recorder.searcher_value(metrics)
        decision = recorder.record(value, self._time())
        recorder.note_validation(self._batches(), metrics)
        if recorder.ranked_out(decision) and self._trained_full_length():
            logger.info(
                f"trial {trial_number(self.trial)}: completed: it trained the full length "
                f"its script asked for, {describe_length(self.max_length)}, and stops at "
                f"rung {decision.rung} of {list(self.bracket.rung_units)} "
                f"{self.settings.time_metric}"
            )
        elif recorder.ranked_out(decision) and not recorder.stopped:
            recorder.stop(value)
            self.context.set_stop_requested(True)


def describe_length(length: Optional[TrainUnit]) -> str:
    """``Batch(64)`` as "64 batches", ``Epoch(1)`` as "1 epoch".

    >>> from det_lightning.pytorch import Batch, Epoch
    >>> describe_length(Batch(64)), describe_length(Epoch(1)), describe_length(Epoch(3))
    ('64 batches', '1 epoch', '3 epochs')
    """
    if length is None:
        return "its length"
    unit = "epoch" if isinstance(length, Epoch) else "batch"
    plural = "" if length.value == 1 else ("es" if unit == "batch" else "s")
    return f"{length.value} {unit}{plural}"


def rung_metrics(study: optuna.Study, rungs: int, exclude: int = -1) -> List[List[float]]:
    """What the study's trials recorded at each rung (InvalidHP trials left out; a trial taken
    over counts once, through its continuation, which carries its results); ``exclude``: a
    trial number."""
    found: List[List[float]] = [[] for _ in range(rungs)]
    for other in study.get_trials(deepcopy=False):
        record = TrialRecord.of(other)
        if not record.counted or is_superseded(other) or record.number == exclude:
            continue
        for index, value in record.rungs.items():
            if index < rungs:
                found[index].append(value)
    return found


def counted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial counts in the search: not dropped for InvalidHP, nor as surplus."""
    return not (trial.user_attrs.get(INVALID_HP) or trial.user_attrs.get(SURPLUS))
