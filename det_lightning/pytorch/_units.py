"""Training lengths and periods: ``Batch(n)``, ``Epoch(n)``, and which batches they land on.

Everything here is pure arithmetic over batch counts, so the schedule can be tested without a
Trainer. A period is reached after the batch that makes ``batches_trained`` (for ``Batch``) or the
count of finished epochs (for ``Epoch``, only on an epoch's last batch) a multiple of its value,
or a member of it when the value is a container (``Batch([5, 30, 45])``). Counting runs across
epoch boundaries, as in Determined.

>>> Batch(4).should_stop(8), Batch([5, 30]).should_stop(30), Epoch(2).should_stop(3)
(True, True, False)
"""

import enum
import sys
from collections import abc
from typing import AbstractSet, Any, FrozenSet, Optional, Tuple, Union


class TrainUnit:
    """A length of training: a number of batches or epochs, or a container of them.

    Args:
        value: an ``int`` (every ``value`` units) or a container of ints (at those units).
    """

    def __init__(self, value: Union[int, abc.Container]) -> None:
        if type(self) is TrainUnit:
            raise TypeError(
                "TrainUnit is abstract: use det_lightning.pytorch.Batch(n) or Epoch(n)."
            )
        if isinstance(value, (bool, str, bytes)) or not isinstance(value, (int, abc.Container)):
            raise TypeError(
                f"{type(self).__name__}({value!r}) is not a valid length. Expected an int or a "
                "container of ints, e.g. Batch(100) or Batch([5, 30, 45])."
            )
        self.value = value

    def should_stop(self, step_num: int) -> bool:
        """Whether this period is reached when ``step_num`` units are done."""
        if isinstance(self.value, int):
            return self._divides(step_num)
        return step_num in self.value

    def _divides(self, steps: int) -> bool:
        assert isinstance(self.value, int)
        if self.value < 1:
            return True
        if steps == 0:
            return False
        return steps % self.value == 0

    @staticmethod
    def _from_values(
        batches: Optional[int] = None,
        records: Optional[int] = None,
        epochs: Optional[int] = None,
        global_batch_size: Optional[int] = None,
    ) -> "TrainUnit":
        """From exactly one of a config's ``batches``/``records``/``epochs`` (values below 1 mean
        never, as in Determined)."""
        given = [v is not None for v in (batches, records, epochs)]
        if sum(given) != 1:
            raise ValueError(
                f"Expected exactly one of batches, records, epochs; got batches={batches} "
                f"records={records} epochs={epochs}."
            )
        if batches is not None:
            return Batch(batches if batches >= 1 else sys.maxsize)
        if epochs is not None:
            return Epoch(epochs if epochs >= 1 else sys.maxsize)
        assert records is not None
        if not global_batch_size:
            raise ValueError(
                "A length in records needs hyperparameters.global_batch_size to convert records "
                "to batches."
            )
        return Batch._from_records(records if records >= 1 else sys.maxsize, global_batch_size)

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.value)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self.value!r})"


class Epoch(TrainUnit):
    """A length in epochs; an epoch is ``len()`` of the training data loader, in batches."""


class Batch(TrainUnit):
    """A length in batches (optimizer steps times ``aggregation_frequency``)."""

    @staticmethod
    def _from_records(records: int, global_batch_size: int) -> "Batch":
        return Batch(max(records // global_batch_size, 1))


class AnyOf(TrainUnit):
    """Several periods, reached when any of them is: not Determined's API, but what
    ``det-lightning experiment`` gives an ``adaptive_asha`` trial, which validates at its rungs
    (in the searcher's unit) and at ``min_validation_period`` (in its own), as Determined does.

    >>> period = AnyOf(Batch([6, 12]), Epoch(1))
    >>> [n for n in range(1, 17) if unit_reached(period, n, epoch_len=8)]
    [6, 8, 12, 16]
    """

    def __init__(self, *periods: TrainUnit) -> None:
        if not periods or not all(isinstance(p, (Batch, Epoch)) for p in periods):
            raise TypeError(f"AnyOf{periods!r}: expected Batch(...) and Epoch(...) periods.")
        super().__init__(tuple(periods))
        self.periods: Tuple[TrainUnit, ...] = tuple(periods)

    def should_stop(self, step_num: int) -> bool:
        raise TypeError("AnyOf mixes units: ask unit_reached(period, batches, epoch_len).")


class Boundary(enum.Enum):
    """What a reached period asks for, in the order Determined handles them."""

    TRAIN = "TRAIN"
    VALIDATE = "VALIDATE"
    CHECKPOINT = "CHECKPOINT"
    REPORT = "REPORT"


def unit_reached(unit: TrainUnit, batches_trained: int, epoch_len: int) -> bool:
    """Whether ``unit`` is reached by the batch that brought the count to ``batches_trained``.

    >>> unit_reached(Epoch(1), 10, 10), unit_reached(Epoch(1), 9, 10), unit_reached(Batch(3), 9, 10)
    (True, False, True)
    """
    if isinstance(unit, AnyOf):
        return any(unit_reached(period, batches_trained, epoch_len) for period in unit.periods)
    if isinstance(unit, Batch):
        return unit.should_stop(batches_trained)
    if isinstance(unit, Epoch):
        epochs_done, batch_in_epoch = divmod(batches_trained, epoch_len)
        return batch_in_epoch == 0 and unit.should_stop(epochs_done)
    raise TypeError(f"Expected a Batch or Epoch, got {type(unit).__name__}.")


class Schedule:
    """Which boundaries a batch reaches, given ``fit()``'s periods.

    Args:
        max_length: total training length (a ``Batch`` or ``Epoch`` of an int).
        validation_period, checkpoint_period, reporting_period: periods; None means never.
        epoch_len: batches per epoch (the training loader's length).
        test_mode: stop after one batch.

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
        hit = {
            kind
            for kind, unit in self._periods
            if unit is not None and unit_reached(unit, batches_trained, self.epoch_len)
        }
        if self.is_done(batches_trained):
            hit.add(Boundary.TRAIN)
        return frozenset(hit)


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
    batch_seconds: float, agreement_seconds: float, share: float = 0.01,
    most_seconds: float = 1.0, most: int = 4096,
) -> int:
    """Batches until the next stop agreement: agreeing costs about ``share`` of the training
    time, and a stop waits at most about ``most_seconds`` of batches (and ``most`` batches).

    >>> next_agreement_interval(0.0005, 0.001)   # 0.5 ms batches, a 1 ms agreement: 100 ms
    200
    >>> next_agreement_interval(0.2, 0.001)      # long batches: agree after each one
    1
    >>> next_agreement_interval(0.01, 0.05)      # a slow network: wait at most ~1 s
    100
    """
    if batch_seconds <= 0:
        return most
    batches = min(agreement_seconds / (share * batch_seconds), most_seconds / batch_seconds)
    return max(1, min(most, int(batches)))

def check_max_length(max_length: Any) -> TrainUnit:
    """``fit()``'s check of ``max_length``, with errors that name the fix."""
    if max_length is None:
        raise ValueError(
            "max_length must be defined in local training mode: call "
            "fit(max_length=det_lightning.pytorch.Epoch(n)) or fit(max_length=Batch(n))."
        )
    if not isinstance(max_length, (Batch, Epoch)) or not isinstance(max_length.value, int):
        raise TypeError(
            f"fit(max_length={max_length!r}) is not a valid length: max_length must either be a "
            "det.pytorch.Batch(int) or det.pytorch.Epoch(int) type."
        )
    if max_length.value < 1:
        raise ValueError(f"fit(max_length={max_length!r}): the length must be at least 1.")
    return max_length


def check_period(name: str, period: Any) -> Optional[TrainUnit]:
    """``fit()``'s check of a period argument (None means never)."""
    if period is None:
        return None
    if not isinstance(period, (Batch, Epoch, AnyOf)):
        raise TypeError(
            f"fit({name}={period!r}) is not a valid period. Expected det.pytorch.Batch(...) or "
            f"det.pytorch.Epoch(...), e.g. {name}=Batch(100)."
        )
    return period
