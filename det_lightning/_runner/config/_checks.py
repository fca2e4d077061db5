"""Custom checks for the config values the declarative nodes cannot express.

Training lengths, the entrypoint, hyperparameter search spaces, the searcher name and
``shared_fs`` storage paths each get a check here; the schema in ``_schema`` refers to them.
"""

import copy
import os
import re
from typing import Any, Dict

from det_lightning._runner.config._nodes import (
    _KIND_CHECKS,
    _Context,
    _Custom,
    _fail,
    _join,
    _Section,
    _suggest,
    _type_error,
    _validate_section,
    _Value,
    legacy_key_error,
)

_UNITS = ("batches", "epochs", "records")


def _length_check(minimum: int, allow_int: bool, nullable: bool = False) -> _Custom:
    """A check for a training length: ``{batches|epochs|records: N}`` (or a bare int);
    ``nullable``: an explicit null is the key's default, none (as a config read back from
    ``experiment.json``, its defaults filled in, has it)."""

    def check(value: Any, path: str, ctx: _Context) -> Any:
        """Validate one length value; return it normalized."""
        if value is None and nullable:
            return None
        example = f"e.g. {path.rsplit('.', 1)[-1]}: {{batches: 1000}}"
        if allow_int and _KIND_CHECKS["integer"](value):
            return _check_length_number(value, path, minimum)
        if not isinstance(value, dict):
            kinds = ("integer", "mapping") if allow_int else ("mapping",)
            raise _type_error(path, kinds, value, f"Use {example}.")
        for key in value:
            legacy = legacy_key_error(_join(path, key))  # {steps: N}, before Determined 0.12
            if legacy is not None:
                raise legacy
            if key not in _UNITS:
                message = f"unknown training unit {key!r}.{_suggest(str(key), _UNITS)}"
                usage = f"{path} takes exactly one of {', '.join(_UNITS)} ({example})."
                raise _fail(_join(path, key), message, usage)
        if len(value) != 1:
            raise _fail(path, f"needs exactly one of {', '.join(_UNITS)}, got {len(value)}.")
        unit, number = next(iter(value.items()))
        return {unit: _check_length_number(number, _join(path, unit), minimum)}

    return check


def _check_length_number(number: Any, path: str, minimum: int) -> int:
    """A length's count: an integer ``>= minimum``."""
    if not _KIND_CHECKS["integer"](number):
        raise _type_error(path, ("integer",), number)
    if number < minimum:
        raise _fail(path, f"must be >= {minimum}, got {number}.")
    return int(number)


_LEGACY_ENTRYPOINT = re.compile(r"^[A-Za-z0-9_.]+:[A-Za-z0-9_]+$")
_ENTRYPOINT_HINT = "Set it to 'model_def:TrialClass' or a command such as 'python3 train.py'."


def _check_entrypoint(value: Any, path: str, ctx: _Context) -> Any:
    """``entrypoint``: a non-empty string or a non-empty list of strings."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise _type_error(path, ("non-empty string", "list of strings"), value, _ENTRYPOINT_HINT)


def _check_string_list(value: Any, path: str, ctx: _Context) -> Any:
    """A list whose items are all strings (``labels``)."""
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _type_error(f"{path}[{index}]", ("string",), item)
    return value


def _check_ordered_bounds(section: Dict[str, Any], path: str) -> None:
    """``minval < maxval`` for numeric hyperparameters, as Determined requires."""
    if section["minval"] >= section["maxval"]:
        message = f"minval ({section['minval']}) must be less than maxval ({section['maxval']})."
        raise _fail(path, message, "Use a 'const' hyperparameter for a fixed value.")


def _check_categorical(section: Dict[str, Any], path: str) -> None:
    """A categorical hyperparameter needs at least one value."""
    if not section["vals"]:
        raise _fail(_join(path, "vals"), "must list at least one value.")


def _check_log_base(section: Dict[str, Any], path: str) -> None:
    """Bounds and a positive base for a log hyperparameter."""
    _check_ordered_bounds(section, path)
    if section["base"] <= 0:
        raise _fail(_join(path, "base"), f"must be > 0, got {section['base']!r}.")


_HP_TYPE = _Value(("string",))
_HP_COUNT = _Value(("integer",), minimum=1, default=None)
_HP_SECTIONS: Dict[str, _Section] = {
    "const": _Section({"type": _HP_TYPE, "val": _Value(("any",))}, required=("type", "val")),
    "int": _Section(
        {
            "type": _HP_TYPE,
            "minval": _Value(("integer",)),
            "maxval": _Value(("integer",)),
            "count": _HP_COUNT,
        },
        required=("type", "minval", "maxval"),
        check=_check_ordered_bounds,
    ),
    "double": _Section(
        {
            "type": _HP_TYPE,
            "minval": _Value(("number",)),
            "maxval": _Value(("number",)),
            "count": _HP_COUNT,
        },
        required=("type", "minval", "maxval"),
        check=_check_ordered_bounds,
    ),
    "log": _Section(
        {
            "type": _HP_TYPE,
            "minval": _Value(("number",)),
            "maxval": _Value(("number",)),
            "base": _Value(("number",)),
            "count": _HP_COUNT,
        },
        required=("type", "minval", "maxval", "base"),
        check=_check_log_base,
    ),
    "categorical": _Section(
        {"type": _HP_TYPE, "vals": _Value(("list",))},
        required=("type", "vals"),
        check=_check_categorical,
    ),
}


def _check_hparam(value: Any, path: str, ctx: _Context) -> Any:
    """One hyperparameter: a typed search space, a nested group, or a constant."""
    if not isinstance(value, dict):
        return copy.deepcopy(value)  # scalar or list: a constant
    if "type" not in value:
        return _check_hparams(value, path, ctx)  # nested group of hyperparameters
    kind = value["type"]
    if kind not in _HP_SECTIONS:
        valid = list(_HP_SECTIONS)
        suggestion = _suggest(str(kind), valid) if isinstance(kind, str) else ""
        message = f"{kind!r} is not a hyperparameter type.{suggestion}"
        raise _fail(_join(path, "type"), message, f"Use one of {', '.join(valid)}.")
    return _validate_section(_HP_SECTIONS[kind], value, path, ctx)


def _check_hparams(value: Any, path: str, ctx: _Context) -> Any:
    """A mapping of hyperparameter names to hyperparameters."""
    if not isinstance(value, dict):
        raise _type_error(path, ("mapping",), value)
    return {key: _check_hparam(item, _join(path, key), ctx) for key, item in value.items()}


_LOCAL_SEARCHERS = ("single", "grid", "random", "adaptive_asha")
_CLUSTER_ONLY_SEARCHERS = (
    "pbt",
    "async_halving",
    "adaptive",
    "adaptive_simple",
    "sync_halving",
    "custom",
)


def _check_searcher_name(value: Any, path: str, ctx: _Context) -> Any:
    """``searcher.name``: one of the searchers this package understands."""
    if value in _LOCAL_SEARCHERS:
        return value
    usable = ", ".join(_LOCAL_SEARCHERS)
    if value in _CLUSTER_ONLY_SEARCHERS:
        message = f"the {value!r} searcher needs a Determined cluster and is not run locally."
        raise _fail(path, message, f"Use one of {usable}.")
    raise _fail(
        path,
        f"{value!r} is not a searcher.{_suggest(value, _LOCAL_SEARCHERS)}",
        f"Use one of {usable}.",
    )


def _check_searcher(section: Dict[str, Any], path: str) -> None:
    """Keys a particular searcher requires."""
    name = section["name"]
    if name in ("random", "adaptive_asha") and section.get("max_trials") is None:
        raise _fail(
            _join(path, "max_trials"),
            f"required by the {name!r} searcher.",
            "Set how many trials to run, e.g. max_trials: 8.",
        )


def _check_shared_fs(section: Dict[str, Any], path: str) -> None:
    """``storage_path`` must be relative or lie under ``host_path``."""
    storage = section.get("storage_path")
    if storage is None or not os.path.isabs(storage):
        return
    host = os.path.abspath(section["host_path"])
    if os.path.commonpath([host, os.path.abspath(storage)]) != host:
        raise _fail(
            _join(path, "storage_path"),
            f"{storage!r} is neither relative nor inside host_path {host!r}.",
            "Make it relative to host_path.",
        )
