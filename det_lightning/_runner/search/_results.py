"""The search's trials as the summary reads them: status (RUNNING only while a live worker
holds its lease), best metric, batches, rung, checkpoint."""

import logging
import time
from typing import AbstractSet, List, Optional, Sequence, Tuple

import optuna

from det_lightning._runner._lease import expired, host_id, is_superseded
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._trial_record import RUNG, UNRANKED, TrialRecord
from det_lightning._runner.plan import Plan
from det_lightning._runner.search._reporter import trial_number
from det_lightning._runner.trial import TrialResult, newest_with_steps
from det_lightning.pytorch._remote import checkpoint_location
from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning")


def _unfinished_checkpoint(
    plan: Plan, number: int, status: str
) -> Tuple[Optional[CheckpointStore], Optional[int]]:
    """The latest checkpoint of a trial that did not finish (interrupted, running elsewhere,
    failed), which records none: what resuming it starts from; and the batches it holds, which
    the summary shows as the trial's so far."""
    if status not in ("INTERRUPTED", "RUNNING", "ERROR"):
        return None, None
    return newest_with_steps(plan.checkpoint_root / f"trial-{number}")


def _status(frozen: optuna.trial.FrozenTrial, interrupted: AbstractSet[int], timeout: float) -> str:
    """A trial's state in the summary: RUNNING only while a live worker holds its lease."""
    states = optuna.trial.TrialState
    if frozen.state == states.RUNNING:
        gone = expired(
            frozen.user_attrs, frozen.datetime_start, time.time(), timeout, host=host_id()
        )
        return "INTERRUPTED" if gone or trial_number(frozen) in interrupted else "RUNNING"
    if frozen.state == states.FAIL and frozen.user_attrs.get(UNRANKED):
        return "COMPLETED"  # it ended well, without the searcher metric
    return {states.COMPLETE: "COMPLETED", states.PRUNED: "STOPPED_EARLY", states.FAIL: "ERROR"}.get(
        frozen.state, frozen.state.name
    )


def summarize(
    studies: Sequence[optuna.Study],
    plan: Plan,
    settings: SearchSettings,
    interrupted: AbstractSet[int] = frozenset(),
) -> List[TrialResult]:
    """Every trial of the search as the experiment's summary table reads it (``interrupted``:
    trials this process stopped for a signal)."""
    results = []
    for study in studies:
        for frozen in study.get_trials(deepcopy=False):
            record = TrialRecord.of(frozen)
            invalid = settings.searcher == "single" and record.invalid_hp
            if (
                not (record.counted or invalid)
                or is_superseded(frozen)
                or frozen.state == optuna.trial.TrialState.WAITING
            ):
                continue
            values = list(frozen.intermediate_values.values())
            best = None
            if values:
                best = min(values) if settings.smaller_is_better else max(values)
            status = (
                "INVALID_HP" if invalid else _status(frozen, interrupted, plan.heartbeat_timeout)
            )
            checkpoint, batches = (
                (checkpoint_location(record.checkpoint), record.batches)
                if record.checkpoint
                else _unfinished_checkpoint(plan, record.number, status)
            )
            stopped_at = status == "STOPPED_EARLY" and RUNG in frozen.user_attrs
            results.append(
                TrialResult(
                    record.number,
                    record.hparams,
                    status,
                    best,
                    checkpoint,
                    batches=record.batches if record.batches is not None else batches,
                    rung=record.rung if stopped_at else None,
                    validations=record.validations,
                )
            )
    return sorted(results, key=lambda r: r.number)
