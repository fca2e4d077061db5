"""Determined's adaptive ASHA arithmetic, against the values of its own Go tests
(``master/pkg/searcher/adaptive_asha_test.go``) and its stopping rule on scripted trials."""

import random
from typing import Dict, List, Tuple

import pytest

from det_lightning._runner import _asha


@pytest.mark.parametrize(
    "max_trials, divisor, brackets, expected",
    [
        (20, 3.0, [3, 2, 1], [12, 5, 3]),
        (50, 3.0, [4, 3], [35, 15]),
        (50, 4.0, [3, 2], [37, 13]),
        (100, 4.0, [4, 3, 2], [70, 22, 8]),
    ],
)
def test_bracket_max_trials(
    max_trials: int, divisor: float, brackets: List[int], expected: List[int]
) -> None:
    assert _asha.bracket_max_trials(max_trials, divisor, brackets) == expected


@pytest.mark.parametrize(
    "max_concurrent, divisor, trials, expected",
    [
        (0, 3.0, [9, 3, 1], [3, 3, 3]),
        (11, 3.0, [9, 3, 1], [4, 4, 3]),
        (0, 4.0, [40, 10], [10, 10]),
    ],
)
def test_bracket_max_concurrent(
    max_concurrent: int, divisor: float, trials: List[int], expected: List[int]
) -> None:
    assert _asha.bracket_max_concurrent(max_concurrent, divisor, trials) == expected


def test_make_brackets_like_determineds_tests() -> None:
    standard = _asha.make_brackets(
        max_time=100, max_trials=10, mode="standard", max_concurrent_trials=2
    )
    assert [(b.num_rungs, b.max_trials, b.max_concurrent_trials) for b in standard] == [
        (2, 7, 1),
        (1, 3, 1),
    ]
    assert [b.rung_units for b in standard] == [(25, 100), (100,)]
    conservative = _asha.make_brackets(
        max_time=1000, max_trials=10, divisor=3.0, mode="conservative", max_concurrent_trials=5
    )
    assert [(b.num_rungs, b.max_trials, b.max_concurrent_trials) for b in conservative] == [
        (3, 7, 2),
        (2, 2, 2),
        (1, 1, 1),
    ]
    assert conservative[0].rung_units == (111, 333, 1000)
    explicit = _asha.make_brackets(max_time=64, max_trials=8, divisor=2.0, bracket_rungs_cfg=[2, 4])
    assert [b.num_rungs for b in explicit] == [4, 2]


def test_a_hand_worked_rung() -> None:
    """Divisor 3, rungs at 1 and 9 units; metrics arrive 0.5, 0.4, 0.6, 0.3, 0.45, 0.7:
    n=1 keep 1: 0.5 goes on; n=2 keep 1: 0.4 (rank 0) on; n=3 keep 1: 0.6 (rank 2) stops;
    n=4 keep 1: 0.3 on; n=5 keep 1: 0.45 (rank 2) stops; n=6 keep 2: 0.7 (rank 5) stops."""
    rung: List[float] = []
    stopped = []
    for value in (0.5, 0.4, 0.6, 0.3, 0.45, 0.7):
        decision = _asha.decide([1, 9], [rung, []], 0, 1, metric=value, divisor=3.0)
        rung.append(value)
        stopped.append(decision.stop)
    assert stopped == [False, False, True, False, True, True]


def _rank_rule(earlier: List[float], value: float, divisor: float) -> bool:
    """Determined's continue rule written out directly: rank among all at the rung so far."""
    ranked = sorted(earlier + [value])
    position = ranked.index(value)  # ties: the newcomer goes first, as Go's sort.Search puts it
    return position < max(int(len(ranked) / divisor), 1)


def test_thirty_scripted_trials_stop_where_determineds_rule_stops_them() -> None:
    """30 trials, rungs at 2, 8 and 32 batches (divisor 4), validating every 2 batches with
    scripted metrics, arriving interleaved: each rung stops exactly the trials the rule names."""
    units = [2, 8, 32]
    rng = random.Random(3)
    script: Dict[int, List[float]] = {
        t: sorted((rng.random() for _ in range(16)), reverse=True) for t in range(30)
    }
    rungs: List[List[float]] = [[], [], []]
    at: Dict[int, int] = {t: 0 for t in range(30)}
    alive = set(range(30))
    stops: Dict[int, Tuple[int, int]] = {}
    for step in range(16):
        for trial in sorted(alive, key=lambda t: (t * 7 + step) % 30):
            time, metric = 2 * (step + 1), script[trial][step]
            if time in units:
                index = units.index(time)
                expected_stop = index == 2 or not _rank_rule(rungs[index], metric, 4.0)
            else:
                expected_stop = False
            decision = _asha.decide(units, rungs, at[trial], time, metric=metric, divisor=4.0)
            assert decision.stop == expected_stop, (trial, time)
            for index, value in decision.entered:
                rungs[index].append(value)
            at[trial] = decision.rung
            if decision.stop:
                alive.discard(trial)
                stops[trial] = (decision.rung, time)
    assert not alive
    per_rung = [sum(1 for r, _ in stops.values() if r == i) for i in range(3)]
    assert sum(per_rung) == 30 and per_rung[0] > per_rung[1] > 0
