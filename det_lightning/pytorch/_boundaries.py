"""Between two batches: which boundaries a batch reaches (``Schedule``), what the engine does
then (``decide``: the per-batch decision table, and ``after_validation``), and when the ranks
agree on stopping (``stop_agreement_due``, ``next_agreement_interval``).

Everything here is pure, so every combination is tested without a Trainer
(``tests/unit/test_decide.py``); ``adapters/schedule.py`` carries the actions out. The lengths and
periods themselves (``Batch``, ``Epoch``, ``unit_reached``) are ``_units.py``'s.
"""

import enum
from typing import AbstractSet, FrozenSet, Optional, Set, Tuple

from det_lightning.pytorch._units import Batch, Epoch, TrainUnit, every_reached, unit_reached


class Boundary(enum.Enum):
    """What a reached period asks for, in the order Determined handles them."""

    TRAIN = "TRAIN"
    VALIDATE = "VALIDATE"
    CHECKPOINT = "CHECKPOINT"
    REPORT = "REPORT"


class Schedule:
    """Which boundaries a batch reaches, given ``fit()``'s periods.

    Args:
        max_length: total training length (a ``Batch`` or ``Epoch`` of an int).
        validation_period, checkpoint_period, reporting_period: periods; None means never.
        epoch_len: batches per epoch (the training loader's length).
        test_mode: stop after one batch.

    >>> from det_lightning.pytorch._units import Batch
    >>> s = Schedule(Epoch(2), Batch(4), Epoch(1), Batch(100), epoch_len=5)
    >>> [sorted(b.value for b in s.reached(n)) for n in (4, 5, 8, 10)]
    [['VALIDATE'], ['CHECKPOINT'], ['VALIDATE'], ['CHECKPOINT', 'TRAIN']]
    """

    def __init__(
        self,
        max_length: TrainUnit,
        validation_period: Optional[TrainUnit],
        checkpoint_period: Optional[TrainUnit],
        reporting_period: Optional[TrainUnit],
        *,
        epoch_len: int,
        test_mode: bool = False,
    ) -> None:
        if epoch_len < 1:
            raise ValueError(
                f"The training data loader has length {epoch_len}; it must yield at least one "
                "batch per epoch."
            )
        self.max_length = max_length
        self.epoch_len = epoch_len
        self.test_mode = test_mode
        self._periods = [
            (Boundary.VALIDATE, validation_period),
            (Boundary.CHECKPOINT, checkpoint_period),
            (Boundary.REPORT, reporting_period),
        ]
        # reached()'s answer for most batches, worked out once per stretch between boundaries:
        # no boundary lies strictly between _quiet_from and _quiet_to (None: ask every batch).
        self._quiet_from = 0
        self._quiet_to: Optional[int] = None

    def total_batches(self) -> int:
        """Batches trained when ``max_length`` is reached (one in test mode)."""
        if self.test_mode:
            return 1
        assert isinstance(self.max_length.value, int)
        if isinstance(self.max_length, Epoch):
            return self.max_length.value * self.epoch_len
        return self.max_length.value

    def is_done(self, batches_trained: int) -> bool:
        return batches_trained >= self.total_batches()

    def reached(self, batches_trained: int) -> FrozenSet[Boundary]:
        """The boundaries reached by the batch that brought the count to ``batches_trained``."""
        quiet_to = self._quiet_to
        if quiet_to is not None and self._quiet_from < batches_trained < quiet_to:
            return _NONE_REACHED
        hit = self._reached(batches_trained)
        self._quiet_from, self._quiet_to = batches_trained, self._next_boundary(batches_trained)
        return hit

    def _next_boundary(self, batches_trained: int) -> Optional[int]:
        """The first count above ``batches_trained`` that may reach a boundary, when every
        period is a whole number of batches or epochs (else None: ``reached`` works each
        batch out).

        >>> Schedule(Epoch(2), Batch(4), Epoch(1), Batch(100), epoch_len=5)._next_boundary(5)
        8
        """
        total = self.total_batches()
        if total <= batches_trained:  # past the end every count reaches TRAIN
            return None
        upcoming = [total]
        for _, unit in self._periods:
            if unit is None:
                continue
            if type(unit) is Batch and type(unit.value) is int and unit.value >= 1:
                every = unit.value
            elif type(unit) is Epoch and type(unit.value) is int and unit.value >= 1:
                every = unit.value * self.epoch_len
            else:  # a list of batches, AnyOf, a period below 1: asked every batch
                return None
            upcoming.append((batches_trained // every + 1) * every)
        return min(upcoming)

    def _reached(self, batches_trained: int) -> FrozenSet[Boundary]:
        hit: Set[Boundary] = set()
        for kind, unit in self._periods:
            if unit is None:
                continue
            # Batch(n), the common period: unit_reached's answer without its type dispatch
            # (seven calls a batch for each period), by the same rule
            if type(unit) is Batch and type(unit.value) is int:
                if every_reached(unit.value, batches_trained):
                    hit.add(kind)
            elif unit_reached(unit, batches_trained, self.epoch_len):
                hit.add(kind)
        if batches_trained >= self.total_batches():  # is_done
            hit.add(Boundary.TRAIN)
        return frozenset(hit) if hit else _NONE_REACHED


_NONE_REACHED: FrozenSet[Boundary] = frozenset()  # most batches' answer, made once


class Action(enum.Enum):
    """What the engine does after a batch, in the order :func:`decide` lists them."""

    REPORT = "REPORT"  # report the training workload's metrics (on_training_workload_end)
    STOP = "STOP"  # training ends after this batch (any validation due still runs)
    VALIDATE = "VALIDATE"  # a validation pass; the actions after it wait for its end
    CHECKPOINT = "CHECKPOINT"  # a checkpoint, unless the newest one is of this batch


def decide(
    reached: AbstractSet[Boundary], stop: bool, validation_current: bool
) -> Tuple[Action, ...]:
    """Every decision between two batches: what to do, in order, after the batch that reached
    ``reached``, when the ranks agreed to ``stop`` (a signal or ``set_stop_requested``) and
    ``validation_current`` says a validation already ran at this batch.

    Determined's order: report first; validate at a VALIDATE boundary, then checkpoint; a stop
    skips the final validation but not a periodic one; at the end, the CHECKPOINT boundary is
    handled before the final validation, which is followed by the final checkpoint.

    >>> R, V, C, T = Boundary.REPORT, Boundary.VALIDATE, Boundary.CHECKPOINT, Boundary.TRAIN
    >>> def names(actions): return " ".join(a.value for a in actions) or "-"
    >>> names(decide(set(), False, False)), names(decide({R}, False, False))
    ('-', 'REPORT')
    >>> names(decide({V, C}, False, False)), names(decide({V}, False, True))
    ('REPORT VALIDATE CHECKPOINT', 'REPORT')
    >>> names(decide(set(), True, False)), names(decide({V}, True, False))
    ('REPORT STOP CHECKPOINT', 'REPORT STOP VALIDATE CHECKPOINT')
    >>> names(decide({T, C}, False, False)), names(decide({T}, False, True))
    ('REPORT CHECKPOINT STOP VALIDATE CHECKPOINT', 'REPORT STOP')
    """
    if not reached and not stop:
        return ()
    done = Boundary.TRAIN in reached
    ending = (Action.STOP,) if done or stop else ()
    if Boundary.VALIDATE in reached and not validation_current:
        # A periodic validation runs even when stopping; a due checkpoint follows it.
        due = ending or Boundary.CHECKPOINT in reached
        return (Action.REPORT, *ending, Action.VALIDATE, *((Action.CHECKPOINT,) if due else ()))
    if stop:  # skips the final validation, as Determined does
        return (Action.REPORT, Action.STOP, Action.CHECKPOINT)
    actions = [Action.REPORT]
    if Boundary.CHECKPOINT in reached:
        actions.append(Action.CHECKPOINT)
    if done:
        actions.append(Action.STOP)
        if not validation_current:
            actions += [Action.VALIDATE, Action.CHECKPOINT]
    return tuple(actions)


def after_validation(pending: Tuple[Action, ...], stop: bool) -> Tuple[Action, ...]:
    """The actions left once a validation ends: those :func:`decide` placed after it, plus a
    checkpoint and a stop when the ranks agreed, after it, to stop.

    >>> [a.value for a in after_validation((Action.CHECKPOINT,), True)]
    ['CHECKPOINT', 'STOP']
    >>> after_validation((), False)
    ()
    """
    if not stop:
        return pending
    return pending + tuple(a for a in (Action.CHECKPOINT, Action.STOP) if a not in pending)


def stop_agreement_due(
    batches_trained: int, reached: AbstractSet[Boundary], world_size: int, next_at: int
) -> bool:
    """Whether the ranks agree on stopping after this batch: after every batch with one process
    (no collective is involved), else at every period boundary and once ``next_at`` batches
    are trained (the previous agreement set it, the same on every rank). Every rank gets the
    same answer, so all take part in the same agreements.

    >>> [stop_agreement_due(b, set(), 2, 16) for b in (15, 16)], stop_agreement_due(3, set(), 1, 16)
    ([False, True], True)
    >>> stop_agreement_due(5, {Boundary.REPORT}, 2, 16)
    True
    """
    return world_size == 1 or bool(reached) or batches_trained >= next_at


def next_agreement_interval(
    batch_seconds: float,
    agreement_seconds: float,
    *,
    share: float = 0.002,
    most_seconds: float = 1.0,
    most: int = 4096,
) -> int:
    """Batches until the next stop agreement: agreeing costs about ``share`` of the training
    time, and a stop waits at most about ``most_seconds`` of batches (and ``most`` batches).

    >>> next_agreement_interval(0.0005, 0.001)   # 0.5 ms batches, a 1 ms agreement: 0.5 s
    1000
    >>> next_agreement_interval(0.2, 0.001)      # long batches: agree after every few
    2
    >>> next_agreement_interval(0.01, 0.05)      # a slow network: wait at most ~1 s
    100
    """
    if batch_seconds <= 0:
        return most
    batches = min(agreement_seconds / (share * batch_seconds), most_seconds / batch_seconds)
    return max(1, min(most, int(batches)))
