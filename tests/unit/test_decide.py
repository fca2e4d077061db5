"""``decide()``: every between-batch decision, on a table, and the rules it must keep for
every combination of reached boundaries, stop agreement and validation state."""

import itertools
from typing import FrozenSet, Tuple

import pytest

from det_lightning.pytorch import Batch, Epoch
from det_lightning.pytorch._boundaries import (
    Action,
    Boundary,
    Schedule,
    after_validation,
    decide,
    next_agreement_interval,
    stop_agreement_due,
)

R, V, C, T = Boundary.REPORT, Boundary.VALIDATE, Boundary.CHECKPOINT, Boundary.TRAIN


def names(actions: Tuple[Action, ...]) -> str:
    return " ".join(a.value for a in actions) or "-"


@pytest.mark.parametrize(
    "reached,stop,validated,expected",
    [
        (set(), False, False, "-"),
        ({R}, False, False, "REPORT"),
        ({C}, False, False, "REPORT CHECKPOINT"),
        ({V}, False, False, "REPORT VALIDATE"),
        ({V}, False, True, "REPORT"),  # a validation already ran at this batch
        ({V, C}, False, False, "REPORT VALIDATE CHECKPOINT"),  # the checkpoint has its metrics
        ({V, C}, False, True, "REPORT CHECKPOINT"),
        ({T}, False, False, "REPORT STOP VALIDATE CHECKPOINT"),  # the final validation
        ({T}, False, True, "REPORT STOP"),
        ({T, C}, False, False, "REPORT CHECKPOINT STOP VALIDATE CHECKPOINT"),
        ({T, V}, False, False, "REPORT STOP VALIDATE CHECKPOINT"),
        (set(), True, False, "REPORT STOP CHECKPOINT"),  # a stop skips the final validation...
        ({T}, True, False, "REPORT STOP CHECKPOINT"),
        ({V}, True, False, "REPORT STOP VALIDATE CHECKPOINT"),  # ...but not a periodic one
        ({R, C}, True, False, "REPORT STOP CHECKPOINT"),
    ],
)
def test_the_decision_table(reached: set, stop: bool, validated: bool, expected: str) -> None:
    assert names(decide(reached, stop, validated)) == expected


ALL_REACHED = [frozenset(c) for n in range(5) for c in itertools.combinations([R, V, C, T], n)]


@pytest.mark.parametrize("reached", ALL_REACHED, ids=lambda r: "+".join(sorted(b.value for b in r)))
@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize("validated", [False, True])
def test_rules_hold_for_every_combination(
    reached: FrozenSet[Boundary], stop: bool, validated: bool
) -> None:
    actions = decide(reached, stop, validated)
    if not reached and not stop:
        assert actions == ()
        return
    assert actions[0] is Action.REPORT and actions.count(Action.REPORT) == 1
    ending = T in reached or stop
    assert (Action.STOP in actions) == ending
    periodic = V in reached and not validated
    final = T in reached and not stop and not validated
    assert actions.count(Action.VALIDATE) == (1 if periodic or final else 0)
    # The end with a current validation leaves the final checkpoint to on_train_end, which
    # also covers a Lightning callback (EarlyStopping) ending training.
    if stop or C in reached or final:  # something is checkpointed, after any validation
        assert actions[-1] is Action.CHECKPOINT or actions[-1] is Action.STOP
        assert Action.CHECKPOINT in actions
    else:
        assert Action.CHECKPOINT not in actions
    if Action.VALIDATE in actions and ending:
        assert actions.index(Action.VALIDATE) < len(actions) - 1  # a checkpoint follows it


def test_a_stop_agreed_during_a_validation_adds_a_checkpoint_and_a_stop() -> None:
    assert after_validation((), False) == ()
    assert names(after_validation((), True)) == "CHECKPOINT STOP"
    assert names(after_validation((Action.CHECKPOINT,), True)) == "CHECKPOINT STOP"
    assert names(after_validation((Action.CHECKPOINT,), False)) == "CHECKPOINT"


def test_ranks_agree_at_every_boundary_and_once_the_interval_is_up() -> None:
    schedule = Schedule(Epoch(2), Batch(5), None, Batch(100), epoch_len=12)
    due = [
        b
        for b in range(1, 25)
        if stop_agreement_due(b, schedule.reached(b), world_size=2, next_at=16)
    ]
    assert due == [5, 10, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]  # next_at moves on agreeing
    assert all(stop_agreement_due(b, frozenset(), world_size=1, next_at=99) for b in range(1, 25))


@pytest.mark.parametrize(
    "batch_s,agreement_s,expected",
    [
        (0.0005, 0.001, 1000),  # overhead-bound: agreeing costs 0.2% of the time
        (0.5, 0.001, 1),  # long batches: a stop waits one batch
        (0.1, 0.001, 5),  # a stop waits about 0.5 s (the agreement's cost over the share)
        (0.01, 0.05, 100),  # a slow network: a stop waits about a second, not 5
        (0.0, 0.001, 4096),  # no time measured yet: the cap
        (1e-7, 1.0, 4096),
    ],
)
def test_the_next_agreement_interval(batch_s: float, agreement_s: float, expected: int) -> None:
    assert next_agreement_interval(batch_s, agreement_s) == expected


@pytest.mark.parametrize(
    "period",
    [Batch(1), Batch(3), Batch(7), Batch(0), Batch([2, 5, 9]), Epoch(1), Epoch(2), None],
    ids=repr,
)
def test_reached_answers_as_unit_reached(period: object) -> None:
    """``Schedule.reached``'s own check of a ``Batch(n)`` period gives ``unit_reached``'s
    answer (the general one, which every other period still takes) at every count."""
    from det_lightning.pytorch._units import unit_reached

    schedule = Schedule(Batch(40), period, None, None, epoch_len=4)
    for n in range(0, 41):
        expected = period is not None and unit_reached(period, n, 4)
        assert (V in schedule.reached(n)) == expected, n


def test_reached_skips_the_stretches_between_boundaries_without_missing_one() -> None:
    """``reached`` answers from its cached stretch (no boundary strictly between two counts)
    exactly as working each count out does: every mix of periods, lengths in batches and
    epochs, counts in order and shuffled, past the end of training."""
    import random

    from det_lightning.pytorch._units import AnyOf

    periods = [None, Batch(1), Batch(3), Batch(7), Batch(0), Epoch(1), Epoch(2)]
    periods += [Batch([2, 5, 9]), AnyOf(Batch([6, 12]), Epoch(1))]
    rng = random.Random(0)
    cached = 0
    for _ in range(400):
        epoch_len = rng.randint(1, 9)
        length = rng.choice([Batch(rng.randint(1, 40)), Epoch(rng.randint(1, 4))])
        chosen = [rng.choice(periods) for _ in range(3)]
        schedule = Schedule(length, *chosen, epoch_len=epoch_len)
        counts = list(range(60))
        if rng.random() < 0.3:
            rng.shuffle(counts)
        for n in counts:
            cached += (
                schedule._quiet_to is not None and schedule._quiet_from < n < schedule._quiet_to
            )
            assert schedule.reached(n) == schedule._reached(n), (length, chosen, epoch_len, n)
    assert cached > 200  # the stretches were used, not only worked out
