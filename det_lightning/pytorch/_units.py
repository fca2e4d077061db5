"""Training lengths and periods: ``Batch(n)``, ``Epoch(n)``, and which batches they land on.

Everything here is pure arithmetic over batch counts, so the schedule can be tested without a
Trainer. A period is reached after the batch that makes ``batches_trained`` (for ``Batch``) or the
count of finished epochs (for ``Epoch``, only on an epoch's last batch) a multiple of its value,
or a member of it when the value is a container (``Batch([5, 30, 45])``). Counting runs across
epoch boundaries, as in Determined.

>>> Batch(4).should_stop(8), Batch([5, 30]).should_stop(30), Epoch(2).should_stop(3)
(True, True, False)
"""

import sys
from collections import abc
from typing import Any, Optional, Tuple, Union


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
        return every_reached(self.value, steps)

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


def every_reached(every: int, done: int) -> bool:
    """Whether a period of ``every`` units is reached when ``done`` units are done (a period
    below 1 is reached every time; nothing is reached at 0).

    >>> every_reached(3, 6), every_reached(3, 7), every_reached(3, 0), every_reached(0, 5)
    (True, False, False, True)
    """
    if every < 1:
        return True
    return done != 0 and done % every == 0


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
