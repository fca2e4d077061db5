"""Determined's adaptive ASHA arithmetic, as its master computes it (``master/pkg/searcher``).

Pure functions, so each number can be checked against Determined's Go code by hand::

    rungs R  = min(max_rungs, int(log(max_time)/log(d)) + 1, int(log(max_trials)/log(d)) + 1)
    brackets = by mode: aggressive [R]; standard [R, R-1, ..., (R-1)//2 + 1]; conservative [R..1]
    bracket b gets max_trials * w_b / sum(w) trials (at least 1; the rest to the first bracket),
               w_b = d**(rungs_b - 1) / rungs_b
    rung i of r needs max(int(max_time / d**(r-1-i)), 1) units of the time metric
    at a rung, a trial continues only if it ranks in the top max(int(n/d), 1) of the n trials
               that reached that rung so far (itself included); the last rung ends it
"""

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

# The metric Determined gives a trial that exited early (an error) at its rung: the worst.
EXITED_METRIC = float.fromhex("0x1.fffffffffffffp+1023")


@dataclasses.dataclass(frozen=True)
class Bracket:
    """One ASHA bracket: its rungs' lengths (units of the time metric) and its trial budget."""

    num_rungs: int
    max_trials: int
    max_concurrent_trials: int
    rung_units: Tuple[int, ...]


def _int_log(value: float, base: float) -> int:
    return int(math.log(value) / math.log(base))


def max_rungs(max_rungs_cfg: int, max_time: int, max_trials: int, divisor: float) -> int:
    """The number of rungs of the largest bracket.

    >>> max_rungs(5, 1000, 16, 4.0), max_rungs(5, 64, 100, 2.0), max_rungs(5, 8, 2, 2.0)
    (3, 5, 2)
    """
    return min(max_rungs_cfg, _int_log(max_time, divisor) + 1, _int_log(max_trials, divisor) + 1)


def bracket_rungs(mode: str, rungs: int) -> List[int]:
    """Each bracket's number of rungs, largest first.

    >>> bracket_rungs("aggressive", 4), bracket_rungs("standard", 4), bracket_rungs("conservative", 3)
    ([4], [4, 3, 2], [3, 2, 1])
    """
    if mode == "aggressive":
        return [rungs]
    if mode == "standard":
        return list(range(rungs, (rungs - 1) // 2, -1))
    if mode == "conservative":
        return list(range(rungs, 0, -1))
    raise ValueError(f"searcher.mode: {mode!r} is not one of aggressive, standard, conservative.")


def bracket_max_trials(max_trials: int, divisor: float, brackets: Sequence[int]) -> List[int]:
    """``max_trials`` split over the brackets.

    >>> bracket_max_trials(16, 4.0, [3, 2]), bracket_max_trials(10, 2.0, [3, 2, 1])
    ([12, 4], [4, 3, 3])
    """
    weights = [divisor ** (rungs - 1) / rungs for rungs in brackets]
    total = 0.0
    for weight in weights:  # left to right as Go adds them: Python >= 3.12's sum() compensates,
        total += weight  # and one ulp moves a share across an integer (tests/unit/test_asha_tables)
    split = [max(int(w / total * max_trials), 1) for w in weights]
    split[0] += max(max_trials - sum(split), 0)
    return split


def bracket_max_concurrent(
    max_concurrent: int, divisor: float, trials_per_bracket: Sequence[int]
) -> List[int]:
    """``max_concurrent_trials`` split over the brackets (0: Determined picks).

    >>> bracket_max_concurrent(0, 4.0, [12, 4]), bracket_max_concurrent(5, 2.0, [4, 3, 3])
    ([4, 4], [2, 2, 1])
    """
    count = len(trials_per_bracket)
    if max_concurrent == 0:
        return [max(trials_per_bracket[-1], int(divisor))] * count
    max_concurrent = max(max_concurrent, count)
    share, remainder = divmod(max_concurrent, count)
    return [share + (1 if i < remainder else 0) for i in range(count)]


def rung_units(num_rungs: int, divisor: float, max_time: int) -> List[int]:
    """How many units of the time metric each rung needs.

    >>> rung_units(3, 4.0, 1000), rung_units(4, 2.0, 10), rung_units(1, 3.0, 7)
    ([62, 250, 1000], [1, 2, 5, 10], [7])
    """
    return [max(int(max_time / divisor ** (num_rungs - i - 1)), 1) for i in range(num_rungs)]


def make_brackets(
    *,
    max_time: int,
    max_trials: int,
    divisor: float = 4.0,
    mode: str = "standard",
    max_rungs_cfg: int = 5,
    bracket_rungs_cfg: Optional[Sequence[int]] = None,
    max_concurrent_trials: int = 16,
) -> List[Bracket]:
    """The brackets of an ``adaptive_asha`` searcher.

    >>> [(b.num_rungs, b.max_trials, b.rung_units) for b in make_brackets(
    ...     max_time=1000, max_trials=16, divisor=4.0, mode="standard")]
    [(3, 12, (62, 250, 1000)), (2, 4, (250, 1000))]
    """
    if bracket_rungs_cfg:
        rungs = sorted(bracket_rungs_cfg, reverse=True)
    else:
        rungs = bracket_rungs(mode, max_rungs(max_rungs_cfg, max_time, max_trials, divisor))
    trials = bracket_max_trials(max_trials, divisor, rungs)
    concurrent = bracket_max_concurrent(max_concurrent_trials, divisor, trials)
    return [
        Bracket(r, t, c, tuple(rung_units(r, divisor, max_time)))
        for r, t, c in zip(rungs, trials, concurrent)
    ]


@dataclasses.dataclass(frozen=True)
class Decision:
    """What one validation does to a trial: the rungs it entered (with the metric recorded
    there), the rung it is at now, and whether it stops (ranked out, or past the last rung)."""

    entered: Tuple[Tuple[int, float], ...]
    rung: int
    stop: bool


def decide(
    units: Sequence[int],
    rung_metrics: Sequence[Sequence[float]],
    rung: int,
    time: float,
    *,
    metric: float,
    divisor: float,
) -> Decision:
    """Determined's rule for one validation of a trial at rung ``rung``.

    Args:
        units: each rung's length in units of the time metric.
        rung_metrics: the metrics other trials recorded at each rung so far (smaller is better:
            negate a metric where larger is better).
        rung: the rung the trial is at (0 for a new trial).
        time: the validation's time metric (e.g. batches trained).
        metric: its searcher metric (smaller is better).
        divisor: the searcher's divisor.

    >>> decide([2, 8], [[0.5, 0.7, 0.9], []], 0, 2, metric=0.6, divisor=2.0)  # 2nd of 4: top 4/2
    Decision(entered=((0, 0.6),), rung=1, stop=False)
    >>> decide([2, 8], [[0.5, 0.7, 0.9], []], 0, 2, metric=0.8, divisor=2.0)  # 3rd of 4
    Decision(entered=((0, 0.8),), rung=0, stop=True)
    >>> decide([2, 8], [[0.5], [0.4]], 0, 8, metric=0.3, divisor=2.0)  # past rung 0, to the last
    Decision(entered=((0, 0.3), (1, 0.3)), rung=1, stop=True)
    >>> decide([2, 8], [[], []], 0, 1, metric=0.3, divisor=2.0)  # not at a rung yet
    Decision(entered=(), rung=0, stop=False)
    """
    entered: List[Tuple[int, float]] = []
    for index in range(rung, len(units)):
        rung = index
        if time < units[index]:
            break
        entered.append((index, metric))
        if index == len(units) - 1:
            return Decision(tuple(entered), index, True)
        # Determined inserts before equal metrics: its rank counts the strictly smaller ones.
        rank = sum(1 for other in rung_metrics[index] if other < metric)
        keep = max(int((len(rung_metrics[index]) + 1) / divisor), 1)
        if rank >= keep:
            return Decision(tuple(entered), index, True)
    return Decision(tuple(entered), rung, False)
