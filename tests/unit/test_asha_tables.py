"""Hand-worked tables: searcher configs and the numbers Determined 0.38.1's master computes for
them, worked out on paper from its Go code (``master/pkg/searcher/adaptive_asha.go``:
``makeBrackets``, ``getBracketMaxTrials``, ``getBracketMaxConcurrentTrials``, the modes;
``asha_stopping.go``: ``makeRungs``; ``grid.go``: ``getGridAxes``). Each row says how its numbers
follow. Rows already in test_asha.py / test_config.py (and the doctests) are not repeated.

Notation: R = min(max_rungs, int(log(max_time)/log(d)) + 1, int(log(max_trials)/log(d)) + 1)
(makeBrackets); standard mode is [(R-1)/2+1 .. R], conservative [1 .. R], aggressive [R], sorted
largest first; bracket weight w = d**(rungs-1)/rungs, share = int(w/sum(w) * max_trials) (at least
1), what is left over goes to the first bracket (getBracketMaxTrials); max_concurrent_trials 0:
every bracket gets max(last bracket's trials, int(d)), else max(mc, brackets) split evenly, the
remainder one each from the first (getBracketMaxConcurrentTrials); rung i of r needs
max(int(max_time / d**(r-1-i)), 1) (makeRungs).
"""

from typing import Any, Dict, List, Tuple

import pytest

from det_lightning._runner import _asha
from det_lightning._runner.config import grid_points

Row = Tuple[Dict[str, Any], List[Tuple[int, int, int, Tuple[int, ...]]]]

BRACKETS: List[Row] = [
    # R = min(5, int(ln 500/ln 3 = 5.66)+1 = 6, int(ln 30/ln 3 = 3.10)+1 = 4) = 4; standard
    # [(4-1)/2+1 = 2 .. 4] -> [4, 3, 2]. w = 27/4, 9/3, 3/2 = 6.75, 3, 1.5, sum 11.25:
    # 0.6*30 = 18, 0.2667*30 = 8, 0.1333*30 = 4 (30, nothing left). mc 0: max(4, int 3) = 4 each.
    # Rungs of 4: 500/27 = 18.5 -> 18, 500/9 = 55.6 -> 55, 500/3 = 166.7 -> 166, 500.
    (
        dict(
            mode="standard",
            divisor=3.0,
            max_time=500,
            max_trials=30,
            max_rungs_cfg=5,
            max_concurrent_trials=0,
        ),
        [(4, 18, 4, (18, 55, 166, 500)), (3, 8, 4, (55, 166, 500)), (2, 4, 4, (166, 500))],
    ),
    # R = min(3, int(4.32)+1 = 5, int(ln 7/ln 2 = 2.81)+1 = 3) = 3; conservative [3, 2, 1].
    # w = 4/3, 1, 1, sum 10/3: 0.4*7 = 2.8 -> 2, 0.3*7 = 2.1 -> 2, 2.1 -> 2; 6, 1 left -> first.
    # mc 5: 5/3 = 1, remainder 2 -> [2, 2, 1]. Rungs: 20/4, 20/2, 20.
    (
        dict(
            mode="conservative",
            divisor=2.0,
            max_time=20,
            max_trials=7,
            max_rungs_cfg=3,
            max_concurrent_trials=5,
        ),
        [(3, 3, 2, (5, 10, 20)), (2, 2, 2, (10, 20)), (1, 2, 1, (20,))],
    ),
    # R = min(5, int(4.98)+1 = 5, int(ln 20/ln 4 = 2.16)+1 = 3) = 3; aggressive [3]; all 20
    # trials; mc 16 -> [16]. Rungs: 1000/16 = 62.5 -> 62, 1000/4 = 250, 1000.
    (
        dict(
            mode="aggressive",
            divisor=4.0,
            max_time=1000,
            max_trials=20,
            max_rungs_cfg=5,
            max_concurrent_trials=16,
        ),
        [(3, 20, 16, (62, 250, 1000))],
    ),
    # max_rungs binds: R = min(3, 10, 10) = 3; standard [(3-1)/2+1 = 2 .. 3] -> [3, 2].
    # w = 4/3, 1, sum 7/3: 0.571*1000 = 571.4 -> 571, 0.429*1000 = 428.6 -> 428; 1 left -> 572.
    # mc 3: 3/2 = 1, remainder 1 -> [2, 1]. Rungs: 1000/4, 1000/2, 1000.
    (
        dict(
            mode="standard",
            divisor=2.0,
            max_time=1000,
            max_trials=1000,
            max_rungs_cfg=3,
            max_concurrent_trials=3,
        ),
        [(3, 572, 2, (250, 500, 1000)), (2, 428, 1, (500, 1000))],
    ),
    # max_time binds: R = min(5, int(ln 10/ln 4 = 1.66)+1 = 2, int(4.48)+1 = 5) = 2; standard
    # [(2-1)/2+1 = 1 .. 2] -> [2, 1]. w = 2, 1: 500*2/3 = 333.3 -> 333, 166.7 -> 166; 1 left.
    # mc 0: max(166, 4) = 166 each. Rungs: int(10/4) = 2, 10.
    (
        dict(
            mode="standard",
            divisor=4.0,
            max_time=10,
            max_trials=500,
            max_rungs_cfg=5,
            max_concurrent_trials=0,
        ),
        [(2, 334, 166, (2, 10)), (1, 166, 166, (10,))],
    ),
    # One trial: int(ln 1/ln 4) + 1 = 1 rung; standard [1]; max(int(1.0*1), 1) = 1; mc 0:
    # max(1, int 4) = 4 (Determined's default, more than the one trial).
    (
        dict(
            mode="standard",
            divisor=4.0,
            max_time=100,
            max_trials=1,
            max_rungs_cfg=5,
            max_concurrent_trials=0,
        ),
        [(1, 1, 4, (100,))],
    ),
    # bracket_rungs [3] skips R; rungs max(int(5/16) = 0, 1) = 1, int(5/4) = 1, 5; mc max(2, 1).
    (
        dict(
            mode="standard",
            divisor=4.0,
            max_time=5,
            max_trials=9,
            bracket_rungs_cfg=[3],
            max_concurrent_trials=2,
        ),
        [(3, 9, 2, (1, 1, 5))],
    ),
    # bracket_rungs [3, 5, 4], sorted largest first (sort.Reverse). w = 2401/5, 343/4, 49/3:
    # the exact shares are whole (588, 105, 20 of 713), but Go adds the weights left to right
    # in float64 (totalWeight += w), landing one ulp above 34937/60, so each share truncates
    # one lower: 587 + 104 + 19 = 710, and the 3 left go to the first. (A compensated sum, as
    # Python 3.12's sum(), gives 588, 105, 20.) mc 0: max(19, 7). Rungs: 4000/2401 = 1.67 -> 1,
    # 4000/343 = 11.7 -> 11, 4000/49 = 81.6 -> 81, 4000/7 = 571.4 -> 571, 4000.
    (
        dict(
            mode="standard",
            divisor=7.0,
            max_time=4000,
            max_trials=713,
            bracket_rungs_cfg=[3, 5, 4],
            max_concurrent_trials=0,
        ),
        [
            (5, 590, 19, (1, 11, 81, 571, 4000)),
            (4, 104, 19, (11, 81, 571, 4000)),
            (3, 19, 19, (81, 571, 4000)),
        ],
    ),
]


@pytest.mark.parametrize("config, expected", BRACKETS)
def test_brackets_as_determined_computes_them(
    config: Dict[str, Any], expected: List[Tuple[int, int, int, Tuple[int, ...]]]
) -> None:
    brackets = _asha.make_brackets(**config)
    assert [
        (b.num_rungs, b.max_trials, b.max_concurrent_trials, b.rung_units) for b in brackets
    ] == expected


GRID: List[Tuple[Dict[str, Any], List[Any]]] = [
    # i*(max-min)/(count-1) in float, then math.Round (half away from zero): -5 + 10/3 = -1.67
    # -> -2, -5 + 20/3 = 1.67 -> 2.
    ({"type": "int", "minval": -5, "maxval": 5, "count": 4}, [-5, -2, 2, 5]),
    # -1 + 3/2 = 0.5 rounds away from zero to 1 (Python's round() would give 0).
    ({"type": "int", "minval": -1, "maxval": 2, "count": 3}, [-1, 1, 2]),
    # -4 + 3/2 = -2.5 -> -3 (round() would give -2).
    ({"type": "int", "minval": -4, "maxval": -1, "count": 3}, [-4, -3, -1]),
    # count 1: math.Round(float64(-4 + -1) / 2.0) = Round(-2.5) = -3.
    ({"type": "int", "minval": -4, "maxval": -1, "count": 1}, [-3]),
    # count clamped to maxval - minval + 1 = 3 (mathx.Min).
    ({"type": "int", "minval": 3, "maxval": 5, "count": 10}, [3, 4, 5]),
    # 20/6 = 3.33: 0, 3.33 -> 3, 6.67 -> 7, 10, 13.33 -> 13, 16.67 -> 17, 20.
    ({"type": "int", "minval": 0, "maxval": 20, "count": 7}, [0, 3, 7, 10, 13, 17, 20]),
    # minval + float64(i)*(maxval-minval)/float64(count-1), in that order: -1 + 2.0/3 is
    # -0.33333333333333337 in float64 (not -1/3), -1 + 4.0/3 = 0.33333333333333326.
    (
        {"type": "double", "minval": -1.0, "maxval": 1.0, "count": 4},
        [-1.0, -0.33333333333333337, 0.33333333333333326, 1.0],
    ),
    # count 1: (minval + maxval) / 2.0.
    ({"type": "double", "minval": 2.0, "maxval": 5.0, "count": 1}, [3.5]),
    # 0.3 + 1*(0.9-0.3)/1 in float64 is 0.9000000000000001: Go keeps it, so do we.
    ({"type": "double", "minval": 0.3, "maxval": 0.9, "count": 2}, [0.3, 0.9000000000000001]),
    # math.Pow(base, exponent) of the double grid: 2**-1, 2**1, 2**3.
    ({"type": "log", "base": 2, "minval": -1, "maxval": 3, "count": 3}, [0.5, 2.0, 8.0]),
    # count 1: math.Pow(base, (minval + maxval) / 2.0) = 10**-3.
    ({"type": "log", "base": 10, "minval": -4, "maxval": -2, "count": 1}, [1e-3]),
]


@pytest.mark.parametrize("spec, values", GRID)
def test_grid_points_as_determined_computes_them(spec: Dict[str, Any], values: List[Any]) -> None:
    got = [point["x"] for point in grid_points({"x": spec})]
    assert got == values
    assert all(type(g) is type(v) for g, v in zip(got, values))  # ints stay ints
