"""Period arithmetic: which batches validate, report, checkpoint, and where training ends."""

import sys
from typing import List

import pytest

from det_lightning.pytorch import Batch, Epoch, TrainUnit
from det_lightning.pytorch._boundaries import Boundary, Schedule
from det_lightning.pytorch._units import check_max_length, check_period


def batches_reaching(schedule: Schedule, kind: Boundary) -> List[int]:
    return [n for n in range(1, schedule.total_batches() + 1) if kind in schedule.reached(n)]


@pytest.mark.parametrize(
    "period,epoch_len,total,expected",
    [
        (Batch(4), 5, 13, [4, 8, 12]),
        (Batch([3, 7, 11]), 5, 13, [3, 7, 11]),
        (Epoch(1), 5, 15, [5, 10, 15]),
        (Epoch(2), 4, 16, [8, 16]),
        (Epoch([1, 3]), 4, 16, [4, 12]),
        (Batch(6), 4, 16, [6, 12]),  # crosses epoch boundaries
        (Batch(0), 3, 4, [1, 2, 3, 4]),  # a value below 1 means every batch, as Determined
    ],
)
def test_periods_land_on_the_expected_batches(
    period: TrainUnit, epoch_len: int, total: int, expected: List[int]
) -> None:
    schedule = Schedule(Batch(total), period, None, None, epoch_len=epoch_len)
    assert batches_reaching(schedule, Boundary.VALIDATE) == expected


def test_max_length_in_epochs_ends_on_the_last_batch_of_the_epoch() -> None:
    schedule = Schedule(Epoch(3), None, None, None, epoch_len=7)
    assert schedule.total_batches() == 21
    assert batches_reaching(schedule, Boundary.TRAIN) == [21]
    assert not schedule.is_done(20) and schedule.is_done(21)


def test_each_kind_of_period_is_reported_separately() -> None:
    schedule = Schedule(Batch(12), Batch(6), Epoch(1), Batch(4), epoch_len=4)
    assert schedule.reached(4) == {Boundary.CHECKPOINT, Boundary.REPORT}
    assert schedule.reached(6) == {Boundary.VALIDATE}
    assert schedule.reached(12) == {
        Boundary.VALIDATE,
        Boundary.CHECKPOINT,
        Boundary.REPORT,
        Boundary.TRAIN,
    }
    assert schedule.reached(5) == frozenset()


def test_test_mode_stops_after_one_batch() -> None:
    schedule = Schedule(Epoch(10), None, None, None, epoch_len=5, test_mode=True)
    assert schedule.total_batches() == 1
    assert Boundary.TRAIN in schedule.reached(1)


def test_from_values_mirrors_determined_units() -> None:
    assert TrainUnit._from_values(batches=5) == Batch(5)
    assert TrainUnit._from_values(epochs=2) == Epoch(2)
    assert TrainUnit._from_values(records=100, global_batch_size=32) == Batch(3)
    assert TrainUnit._from_values(records=10, global_batch_size=32) == Batch(1)
    assert TrainUnit._from_values(batches=0) == Batch(sys.maxsize)
    with pytest.raises(ValueError, match="exactly one"):
        TrainUnit._from_values(batches=1, epochs=1)
    with pytest.raises(ValueError, match="global_batch_size"):
        TrainUnit._from_values(records=10)


@pytest.mark.parametrize(
    "value,error,match",
    [
        (None, ValueError, "max_length must be defined"),
        (10, TypeError, "Batch\\(int\\) or det.pytorch.Epoch\\(int\\)"),
        (Batch([1, 2]), TypeError, "not a valid length"),
        (Batch(0), ValueError, "at least 1"),
    ],
)
def test_bad_max_length_is_explained(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        check_max_length(value)


def test_bad_period_and_unit_types_are_explained() -> None:
    with pytest.raises(TypeError, match="validation_period=100.*Batch"):
        check_period("validation_period", 100)
    with pytest.raises(TypeError, match="TrainUnit is abstract"):
        TrainUnit(3)
    with pytest.raises(TypeError, match="not a valid length"):
        Batch("3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one batch"):
        Schedule(Batch(1), None, None, None, epoch_len=0)
