"""Hyperparameter search expansion with Determined's grid and random semantics.

Grid values are evenly spaced and include both ends (an ``int`` grid is rounded half away
from zero and clamped to the integers available); a random ``int`` is drawn from
``[minval, maxval]``, both ends included, as Determined draws it since 0.17. The grid's axes
come in name order at every level (Determined's ``Hyperparameters.Each`` sorts the names), and
the first name varies slowest.
"""

import collections
import copy
import dataclasses
import itertools
import json
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from det_lightning._runner.config._checks import _check_hparams
from det_lightning._runner.config._master_random import MasterRandom
from det_lightning._runner.config._nodes import _KIND_CHECKS, _Context, _fail

_Leaf = Tuple[Tuple[str, ...], Any]


def _flatten(
    hparams: Dict[str, Any], prefix: Tuple[str, ...] = (), by_name: bool = False
) -> List[_Leaf]:
    """``(path, spec)`` for every leaf hyperparameter, in config order (or name order)."""
    leaves: List[_Leaf] = []
    for key in sorted(hparams) if by_name else hparams:
        value = hparams[key]
        path = prefix + (key,)
        if isinstance(value, dict) and value and "type" not in value:
            leaves.extend(_flatten(value, path, by_name))
        else:
            leaves.append((path, value))
    return leaves


def _unflatten(pairs: Sequence[Tuple[Tuple[str, ...], Any]]) -> Dict[str, Any]:
    """Rebuild nested dicts from ``(path, value)`` pairs."""
    out: Dict[str, Any] = {}
    for path, value in pairs:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = copy.deepcopy(value)
    return out


def _round_half_away(value: float) -> int:
    """Round like Go's ``math.Round`` (half away from zero), not Python's banker's rounding."""
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def _spaced(minval: float, maxval: float, count: int) -> List[float]:
    """``count`` evenly spaced values from minval to maxval inclusive (midpoint if count 1),
    computed as Determined computes them (``0.3 + 2 * (0.9 - 0.3) / 2`` is one ulp above 0.9
    there too)."""
    if count == 1:
        return [(minval + maxval) / 2.0]
    return [minval + i * (maxval - minval) / (count - 1) for i in range(count)]


# A grid value: what the Optuna study records for it (None for a constant: nothing), and the
# value the trial gets. They differ for ``log`` (the exponent) and ``categorical`` (the index).
GridChoice = Tuple[Any, Any]


def _grid_axis(spec: Any, path: str) -> List[GridChoice]:
    """The values a grid search tries for one hyperparameter."""
    if not isinstance(spec, dict) or "type" not in spec:
        return [(None, spec)]
    kind = spec["type"]
    if kind == "const":
        return [(None, spec["val"])]
    if kind == "categorical":
        return list(enumerate(spec["vals"]))
    if spec.get("count") is None:
        raise _fail(
            path,
            f"grid search needs 'count' for this {kind!r} hyperparameter.",
            "Add e.g. count: 3, or make it a 'const' or 'categorical'.",
        )
    if kind == "int":
        count = min(spec["count"], spec["maxval"] - spec["minval"] + 1)
        values = [_round_half_away(v) for v in _spaced(spec["minval"], spec["maxval"], count)]
        return [(v, v) for v in dict.fromkeys(values)]
    points = _spaced(float(spec["minval"]), float(spec["maxval"]), spec["count"])
    if kind == "log":
        return [(p, float(spec["base"]) ** p) for p in points]
    return [(p, p) for p in points]


def _checked_hparams(hparams: Dict[str, Any]) -> Dict[str, Any]:
    """Validate a ``hyperparameters`` section on its own."""
    checked: Dict[str, Any] = _check_hparams(hparams, "hyperparameters", _Context())
    return checked


def grid_choices(
    hparams: Dict[str, Any],
) -> List[Tuple[Tuple[Tuple[str, ...], ...], Tuple[GridChoice, ...]]]:
    """Every grid point as ``(path, choice)`` per leaf hyperparameter, in Determined's list
    order: leaves by name at every level, the first varying slowest (``newHyperparameterGrid``).

    Raises:
        InvalidConfigException: the section is invalid, or an int/double/log lacks ``count``.
    """
    leaves = _flatten(_checked_hparams(hparams), by_name=True)
    paths = tuple(path for path, _ in leaves)
    axes = [_grid_axis(spec, "hyperparameters." + ".".join(path)) for path, spec in leaves]
    return [(paths, combo) for combo in itertools.product(*axes)]


def grid_points(hparams: Dict[str, Any]) -> List[Dict[str, Any]]:
    """All hyperparameter combinations of a grid search (Determined's grid semantics).

    Hyperparameters in name order, the first varying slowest. Nested groups come back nested.

    >>> grid_points({"b": {"type": "categorical", "vals": [1, 2]},
    ...              "a": {"type": "int", "minval": 0, "maxval": 3, "count": 2}})
    [{'a': 0, 'b': 1}, {'a': 0, 'b': 2}, {'a': 3, 'b': 1}, {'a': 3, 'b': 2}]

    Args:
        hparams: a ``hyperparameters`` section.

    Returns:
        One dict of values per grid point (``[{}]`` when there are no hyperparameters).

    Raises:
        InvalidConfigException: the section is invalid, or an int/double/log lacks ``count``.
    """
    return [
        _unflatten([(path, value) for path, (_, value) in zip(paths, combo)])
        for paths, combo in grid_choices(hparams)
    ]


@dataclasses.dataclass(frozen=True)
class CreatedTrial:
    """One trial as Determined's master creates it (``_master_random``).

    Attributes:
        params: Optuna's parameters (names joined with "."), as ``search._sample.suggest``
            reads them back: an int's or a double's value, a log's exponent, a categorical's
            index; none for a grid's trial (its point is given).
        hparams: the trial's hyperparameter values (nested as configured).
        trial_seed: the trial's seed.
    """

    params: Dict[str, Any]
    hparams: Dict[str, Any]
    trial_seed: int


def _draw(spec: Any, rng: MasterRandom) -> Tuple[Optional[Any], Any]:
    """One hyperparameter's ``(Optuna parameter or None, value)``, as the master's
    ``sampleOne`` draws it."""
    if not isinstance(spec, dict) or "type" not in spec:
        return None, spec
    kind = spec["type"]
    if kind == "const":
        return None, spec["val"]
    if kind == "categorical":
        index = rng.below(len(spec["vals"]))
        return index, spec["vals"][index]
    if kind == "int":  # both ends, as Determined >= 0.17
        value = int(spec["minval"]) + rng.below(int(spec["maxval"]) - int(spec["minval"]) + 1)
        return value, value
    drawn = rng.uniform(float(spec["minval"]), float(spec["maxval"]))
    return drawn, float(spec["base"]) ** drawn if kind == "log" else drawn


class _Creations:
    """The trials Determined's master creates from one experiment seed, drawn as far as asked
    for and kept: the k-th trial of a search costs one draw more, not k."""

    def __init__(self, hparams: Dict[str, Any], seed: Optional[int], sample: bool) -> None:
        self._leaves = _flatten(_checked_hparams(hparams))
        self._by_name = sorted(self._leaves, key=lambda leaf: leaf[0])  # sampleAll: Each sorts
        self._rng = MasterRandom.unseeded() if seed is None else MasterRandom(seed)
        self._sample = sample
        self._made: List[CreatedTrial] = []

    def first(self, count: int) -> List[CreatedTrial]:
        while len(self._made) < count:
            self._made.append(self._create())
        return self._made[:count]

    def _create(self) -> CreatedTrial:
        params: Dict[str, Any] = {}
        values: Dict[Tuple[str, ...], Any] = {}
        for path, spec in self._by_name:
            param, values[path] = _draw(spec, self._rng) if self._sample else (None, spec)
            if param is not None:
                params[".".join(path)] = param
        self._rng.request_id()
        point = _unflatten([(p, values[p]) for p, _ in self._leaves]) if self._sample else {}
        return CreatedTrial(params, point, self._rng.trial_seed())


_CREATIONS: "collections.OrderedDict[Tuple[str, int, bool], _Creations]" = collections.OrderedDict()
_CREATIONS_KEPT = 8  # searches a process draws for (a worker: one)


def created_trials(
    hparams: Dict[str, Any], count: int, seed: Optional[int], *, sample: bool = True
) -> List[CreatedTrial]:
    """The first ``count`` trials Determined's master creates from the experiment seed
    ``seed`` (None: system randomness): each draws its hyperparameters (``sample``; a grid's
    trials do not), a request id and its seed.

    >>> space = {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1}, "n": 3}
    >>> first = created_trials(space, 2, 7)[0]
    >>> sorted(first.params), first.hparams["n"], first.hparams["lr"] == 10 ** first.params["lr"]
    (['lr'], 3, True)
    >>> created_trials(space, 2, 7) == created_trials(space, 3, 7)[:2]
    True
    """
    if seed is None:
        return _Creations(hparams, None, sample).first(count)
    key = (json.dumps(hparams, sort_keys=True, default=repr), seed, sample)
    creations = _CREATIONS.pop(key, None) or _Creations(hparams, seed, sample)
    _CREATIONS[key] = creations  # the most recent last
    while len(_CREATIONS) > _CREATIONS_KEPT:
        _CREATIONS.popitem(last=False)
    return creations.first(count)


def random_points(
    hparams: Dict[str, Any], max_trials: int, seed: Optional[int] = None
) -> List[Dict[str, Any]]:
    """The hyperparameters of the first ``max_trials`` trials a ``random`` search creates:
    with a seed, the values Determined's master draws for it (``created_trials``).

    ``int`` is drawn from ``[minval, maxval]``, ``double`` uniformly from ``[minval, maxval]``,
    ``log`` as ``base ** uniform(minval, maxval)``, ``categorical`` uniformly from ``vals``.

    Args:
        hparams: a ``hyperparameters`` section.
        max_trials: how many samples to draw.
        seed: the experiment seed; None draws from system randomness.

    Returns:
        One dict of values per trial.

    Raises:
        InvalidConfigException: the section is invalid or ``max_trials`` is not positive.
    """
    if not _KIND_CHECKS["integer"](max_trials) or max_trials < 1:
        raise _fail("searcher.max_trials", f"must be a positive integer, got {max_trials!r}.")
    return [copy.deepcopy(t.hparams) for t in created_trials(hparams, max_trials, seed)]
