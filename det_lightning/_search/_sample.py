"""Determined's hyperparameter types drawn through an Optuna trial (so the study records them).

    const        the value                       int          suggest_int(minval, maxval): inclusive
    double       suggest_float(minval, maxval)   log          base ** suggest_float(minval, maxval)
    categorical  vals[suggest_categorical(index)], so any YAML value works
    nested       names joined with "." ("optimizer.lr")
"""

from typing import Any, Dict, Tuple

import optuna


def suggest(trial: optuna.Trial, hparams: Dict[str, Any], prefix: Tuple[str, ...] = ()
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
