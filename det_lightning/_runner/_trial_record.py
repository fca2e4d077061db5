"""What a search keeps on each Optuna trial: the user attributes' names, and ``TrialRecord``, the
typed view of them.

The storage is the search's state, shared by every worker of every machine, and outlives a
release: the names below are its schema (their strings never change; a journal or database a
search wrote keeps working). Written by the worker, the lease keeper and the trial's reporter;
read through ``TrialRecord.of`` where a trial is read whole. ``tests/unit/test_trial_record.py``
checks that nothing in ``_runner`` names a user attribute by a string literal::

    HPARAMS       the trial's hyperparameters (drawn once, kept by its continuations)
    TRIAL_SEED    the trial's seed (drawn with them, kept likewise; absent in a search
                  written before 2026-11-28, whose trials were seeded with experiment_seed)
    TRIAL_NUMBER  the experiment's trial number (1, 2, ... without gaps; continuations keep it)
    HOST, PID     the worker that trains it; LEASE: {"host", "pid", "token", "renewed"}
    RUNGS, RUNG   ASHA: {rung index (str): the searcher metric there}, the rung reached
    STOPPED       ranked out at a rung (the worker tells the study PRUNED)
    CHECKPOINT    its latest checkpoint when it ended; BATCHES: batches it trained
    INVALID_HP    it raised InvalidHP (the message); not counted by the search
    UNRANKED      it ended well without a validation of the searcher metric: told FAIL (Optuna
                  completes only a trial with a value), shown COMPLETED, as Determined does
    SURPLUS       asked for past the budget (two workers at once): told FAIL, never run
    SUPERSEDED    taken over by another worker (then FAIL); CONTINUES: on the continuation,
                  the Optuna trial id it carries on; ORIGIN: the study number first asked for
    GRID_POINT    grid: the index of its point
    VALIDATION_AT + "<batches>": one per validation, {"metrics": its numerical metrics,
                  "time": when (epoch seconds)}: the trial's validation history, which the
                  client's Trial.iter_metrics("validation") reads (since 2026-11-29)
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple, Union

import optuna

from det_lightning._runner._optuna import trial_id

HPARAMS = "hparams"
TRIAL_SEED = "trial_seed"
TRIAL_NUMBER = "trial_number"
HOST = "host"
PID = "pid"
LEASE = "lease"
CLAIM = "claim"
RUNGS = "rungs"
RUNG = "rung"
STOPPED = "stopped"
CHECKPOINT = "checkpoint"
BATCHES = "batches"
INVALID_HP = "invalid_hp"
UNRANKED = "unranked"
SURPLUS = "surplus"
SUPERSEDED = "superseded"
CONTINUES = "continues"
ORIGIN = "origin"
GRID_POINT = "grid_point"
VALIDATION_AT = "validation@"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial's user attributes, typed (read once; writing goes through the names above).

    >>> study = optuna.create_study()
    >>> trial = study.ask()
    >>> trial.set_user_attr(RUNGS, {"0": 1.5}); trial.set_user_attr(HPARAMS, {"lr": 0.1})
    >>> record = TrialRecord.of(trial)
    >>> record.number, record.rungs, record.hparams, record.counted
    (1, {0: 1.5}, {'lr': 0.1}, True)
    """

    number: int
    hparams: Dict[str, Any]
    host: Optional[str] = None
    pid: Optional[int] = None
    rungs: Dict[int, float] = dataclasses.field(default_factory=dict)
    rung: int = 0
    stopped: bool = False
    checkpoint: Optional[str] = None
    batches: Optional[int] = None
    invalid_hp: Optional[str] = None
    surplus: bool = False
    superseded: bool = False
    continues: Optional[int] = None
    grid_point: Optional[int] = None
    trial_seed: Optional[int] = None
    unranked: bool = False
    # (batches, time, metrics) of each validation, by batches
    validations: Tuple[Tuple[int, float, Dict[str, float]], ...] = ()

    @property
    def counted(self) -> bool:
        """Whether the trial counts in the search: not dropped for InvalidHP, nor surplus."""
        return not (self.invalid_hp or self.surplus)

    @classmethod
    def of(cls, trial: Union[optuna.Trial, optuna.trial.FrozenTrial]) -> "TrialRecord":
        attrs = trial.user_attrs
        number = attrs.get(TRIAL_NUMBER)
        invalid = attrs.get(INVALID_HP)
        return cls(
            number=int(number) if number is not None else trial_id(trial) + 1,
            hparams=dict(attrs.get(HPARAMS) or {}),
            host=attrs.get(HOST),
            pid=attrs.get(PID),
            rungs={int(k): float(v) for k, v in (attrs.get(RUNGS) or {}).items()},
            rung=int(attrs.get(RUNG) or 0),
            stopped=bool(attrs.get(STOPPED)),
            checkpoint=attrs.get(CHECKPOINT),
            batches=attrs.get(BATCHES),
            invalid_hp=str(invalid) if invalid else None,
            surplus=bool(attrs.get(SURPLUS)),
            superseded=bool(attrs.get(SUPERSEDED)),
            continues=attrs.get(CONTINUES),
            grid_point=attrs.get(GRID_POINT),
            trial_seed=attrs.get(TRIAL_SEED),
            unranked=bool(attrs.get(UNRANKED)),
            validations=_validations(attrs),
        )


def _validations(attrs: Dict[str, Any]) -> Tuple[Tuple[int, float, Dict[str, float]], ...]:
    """The validation history among a trial's user attributes, by batches.

    >>> _validations({VALIDATION_AT + "8": {"metrics": {"loss": 1.0}, "time": 5.0}, "rung": 0})
    ((8, 5.0, {'loss': 1.0}),)
    """
    found = []
    for key, value in attrs.items():
        steps = key[len(VALIDATION_AT) :]
        if key.startswith(VALIDATION_AT) and steps.isdigit() and isinstance(value, dict):
            metrics = dict(value.get("metrics") or {})
            found.append((int(steps), float(value.get("time") or 0.0), metrics))
    return tuple(sorted(found, key=lambda v: v[0]))


__all__ = [
    "BATCHES",
    "CHECKPOINT",
    "CLAIM",
    "CONTINUES",
    "GRID_POINT",
    "HOST",
    "HPARAMS",
    "INVALID_HP",
    "LEASE",
    "ORIGIN",
    "PID",
    "RUNG",
    "RUNGS",
    "STOPPED",
    "SUPERSEDED",
    "SURPLUS",
    "TRIAL_NUMBER",
    "TRIAL_SEED",
    "TrialRecord",
    "UNRANKED",
    "VALIDATION_AT",
]
