"""Determined's hyperparameter types drawn through an Optuna trial (so the study records them).

const        the value                       int          suggest_int(minval, maxval): inclusive
double       suggest_float(minval, maxval)   log          base ** suggest_float(minval, maxval)
categorical  vals[suggest_categorical(index)], so any YAML value works
nested       names joined with "." ("optimizer.lr")
"""

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import optuna


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


def sampler_for(
    experiment_seed: Optional[int], bracket: int, index: int
) -> optuna.samplers.BaseSampler:
    """The sampler a trial draws its hyperparameters with: with an experiment seed, one seeded
    by (seed, bracket, index), so that a seed gives the same set of points whatever the
    workers' timing, and no two trials of a search (any bracket) share a stream; unseeded, a
    fresh random one.

    >>> def x(seed, bracket, index):
    ...     study = optuna.create_study(sampler=sampler_for(seed, bracket, index))
    ...     return study.ask().suggest_float("x", 0, 1)
    >>> x(7, 0, 0) == x(7, 0, 0), x(7, 0, 0) == x(7, 1, 0), x(7, 0, 0) == x(7, 0, 1)
    (True, False, False)
    """
    if experiment_seed is None:
        return optuna.samplers.RandomSampler()
    state = np.random.SeedSequence([int(experiment_seed) % 2**32, bracket, index])
    return optuna.samplers.RandomSampler(seed=int(state.generate_state(1)[0]))
