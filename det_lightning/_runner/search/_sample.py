"""Determined's hyperparameter types drawn through an Optuna trial (so the study records them).

const        the value                       int          suggest_int(minval, maxval): inclusive
double       suggest_float(minval, maxval)   log          base ** suggest_float(minval, maxval)
categorical  vals[suggest_categorical(index)], so any YAML value works
nested       names joined with "." ("optimizer.lr")
"""

import dataclasses
import secrets
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import optuna

from det_lightning._runner.config import created_trials
from det_lightning._runner.config._master_random import TRIAL_SEED_BOUND


def suggest(
    trial: optuna.Trial, hparams: Dict[str, Any], prefix: Tuple[str, ...] = ()
) -> Dict[str, Any]:
    """The trial's hyperparameter values for a ``hyperparameters`` section."""
    values: Dict[str, Any] = {}
    for key, spec in hparams.items():
        path = prefix + (key,)
        name = ".".join(path)
        if isinstance(spec, dict) and spec and "type" not in spec:
            values[key] = suggest(trial, spec, path)
            continue
        if not isinstance(spec, dict):
            values[key] = spec
            continue
        kind = spec["type"]
        if kind == "const":
            values[key] = spec["val"]
        elif kind == "int":
            values[key] = trial.suggest_int(name, int(spec["minval"]), int(spec["maxval"]))
        elif kind == "double":
            values[key] = trial.suggest_float(name, float(spec["minval"]), float(spec["maxval"]))
        elif kind == "log":
            exponent = trial.suggest_float(name, float(spec["minval"]), float(spec["maxval"]))
            values[key] = float(spec["base"]) ** exponent
        elif kind == "categorical":
            index = trial.suggest_categorical(name, list(range(len(spec["vals"]))))
            values[key] = spec["vals"][int(index)]  # type: ignore[call-overload]
        else:
            raise ValueError(f"hyperparameters.{name}: unknown type {kind!r}")
    return values


def point_index(trials: Sequence[optuna.trial.FrozenTrial], number: int, surplus: str) -> int:
    """Which draw of its bracket the trial ``number`` makes: its place among the bracket's
    trials that were not dropped as surplus (a surplus trial, asked for by a worker after
    another filled the budget, draws nothing), so the same trials get the same draws however
    many workers ask and in which order."""
    return number - sum(1 for t in trials if t.number < number and t.user_attrs.get(surplus))


class FixedPoint(optuna.samplers.BaseSampler):
    """A sampler that gives each parameter the value it was given (a point drawn elsewhere:
    Determined's master's draw), so the study records it as drawn.

    >>> study = optuna.create_study(sampler=FixedPoint({"x": 0.25}))
    >>> study.ask().suggest_float("x", 0, 1)
    0.25
    """

    def __init__(self, params: Dict[str, Any]) -> None:
        self._params = dict(params)

    def infer_relative_search_space(self, study: Any, trial: Any) -> Dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, param_name: str, distribution: Any) -> Any:
        return self._params[param_name]


@dataclasses.dataclass(frozen=True)
class TrialDraw:
    """What a new trial draws: the sampler its hyperparameters come from, and its seed."""

    sampler: optuna.samplers.BaseSampler
    trial_seed: int


def trial_draw(  # noqa: PLR0917  the trial's place: searcher, bracket, draw, grid point
    searcher: str,
    space: Dict[str, Any],
    experiment_seed: Optional[int],
    bracket: int,
    index: int,
    grid_point: Optional[int] = None,
) -> TrialDraw:
    """The hyperparameters and seed of the ``index``-th draw of ``bracket`` (a grid's trial:
    of the point ``grid_point``, whose values are enqueued).

    With an experiment seed, ``single``, ``random`` and ``grid`` give their k-th trial what
    Determined's master gives its k-th (``config.created_trials``: the same values and seed);
    ``adaptive_asha``, whose master creates trials in an order that depends on their timing,
    draws from a stream of (seed, bracket, index), so a seed gives the same points and seeds
    whatever the workers' timing, and no two trials share a stream. Without one (a search
    begun before seeds were recorded, ``_experiment_seed``), a fresh random sampler and seed
    (each trial still seeded, as on a cluster).

    >>> def draw(*args):
    ...     made = trial_draw(*args)
    ...     study = optuna.create_study(sampler=made.sampler)
    ...     return study.ask().suggest_float("x", 0, 1), made.trial_seed
    >>> space = {"x": {"type": "double", "minval": 0, "maxval": 1}}
    >>> draw("random", space, 7, 0, 1) == draw("random", space, 7, 0, 1)
    True
    >>> draw("random", space, 7, 0, 1)[0] == created_trials(space, 2, 7)[1].params["x"]
    True
    >>> draw("adaptive_asha", space, 7, 0, 0) == draw("adaptive_asha", space, 7, 1, 0)
    False
    """
    if experiment_seed is None:
        return TrialDraw(optuna.samplers.RandomSampler(), secrets.randbelow(TRIAL_SEED_BOUND))
    if grid_point is not None:
        made = created_trials(space, grid_point + 1, experiment_seed, sample=False)[-1]
        return TrialDraw(optuna.samplers.RandomSampler(), made.trial_seed)
    if searcher in ("single", "random"):
        made = created_trials(space, index + 1, experiment_seed)[-1]
        return TrialDraw(FixedPoint(made.params), made.trial_seed)
    words = np.random.SeedSequence([experiment_seed, bracket, index]).generate_state(2)
    sampler = optuna.samplers.RandomSampler(seed=int(words[0]))
    return TrialDraw(sampler, int(words[1]) % TRIAL_SEED_BOUND)
