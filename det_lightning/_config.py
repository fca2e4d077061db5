"""Loading and validating Determined experiment configs for running experiments locally.

``load_config`` accepts the YAML a team already submits with ``det experiment create`` and
checks it against a small declarative schema written for this package. It keeps Determined's
key names, types and defaults, and sorts keys into three groups:

* keys with a local meaning (``entrypoint``, ``hyperparameters``, ``searcher``,
  ``min_validation_period``, ``checkpoint_storage``, ...) are validated and defaulted;
* keys that only mean something on a Determined cluster (``environment``, ``bind_mounts``,
  ``resources.resource_pool``, ``profiling``, ...) are accepted, type-checked, and reported
  once as ignored (``ExperimentConfig.ignored_keys`` plus a single logged warning);
* anything else is an error (``det_lightning.errors.InvalidConfigException``) that names the
  key's full path, what was expected, and, for a misspelling, the closest valid key.

Differences from Determined, on purpose:

* ``reproducibility.experiment_seed`` defaults to ``None`` (no seeding). Determined picks a
  time-based seed when the key is absent; set the key to make runs repeatable.
* ``searcher.max_length`` is optional (Determined 0.38 deprecated it for most searchers).
* ``checkpoint_storage`` of type ``s3``, ``gcs`` or ``azure`` is accepted but ignored;
  checkpoints then go wherever the local runner puts them by default.
* A grid search over no hyperparameters yields one trial (``[{}]``), not zero.

The hyperparameter search helpers :func:`grid_points` and :func:`random_points` follow
Determined's master: grid values are evenly spaced and include both ends (an ``int`` grid is
rounded half away from zero and clamped to the integers available), and a random ``int`` is
drawn from ``[minval, maxval)`` as Determined draws it.
"""

import copy
import dataclasses
import difflib
import itertools
import logging
import math
import os
import pathlib
import random
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from det_lightning.errors import InvalidConfigException

logger = logging.getLogger("det_lightning")

# --------------------------------------------------------------------------------------------
# A tiny declarative schema: Value (a leaf), Section (a mapping with fixed keys) and Tagged
# (a mapping whose "type" key picks one of several Sections).
# --------------------------------------------------------------------------------------------

_NO_DEFAULT: Any = object()

_KIND_CHECKS: Dict[str, Callable[[Any], bool]] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "mapping": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "any": lambda v: True,
}


class _Context:
    """Collects the paths of ignored keys while one config is validated."""

    def __init__(self) -> None:
        """Start with no ignored keys."""
        self.ignored: List[str] = []

    def ignore(self, path: str) -> None:
        """Record ``path`` as accepted but without local meaning (once)."""
        if path not in self.ignored:
            self.ignored.append(path)


# A custom check receives (value, path, context) and returns the normalized value.
_Custom = Callable[[Any, str, _Context], Any]


@dataclasses.dataclass(frozen=True)
class _Value:
    """A leaf: one of ``kinds``, optionally restricted to ``choices`` or ``>= minimum``."""

    kinds: Tuple[str, ...]
    default: Any = _NO_DEFAULT
    choices: Optional[Tuple[Any, ...]] = None
    minimum: Optional[float] = None
    ignored: bool = False
    custom: Optional[_Custom] = None
    hint: str = ""


@dataclasses.dataclass(frozen=True)
class _Section:
    """A mapping with a fixed set of keys; absent optional keys get their defaults."""

    fields: Mapping[str, Any]
    required: Tuple[str, ...] = ()
    ignored: bool = False
    check: Optional[Callable[[Dict[str, Any], str], None]] = None
    hint: str = ""


@dataclasses.dataclass(frozen=True)
class _Tagged:
    """A mapping whose ``tag`` key selects which Section validates the rest."""

    tag: str
    variants: Mapping[str, _Section]
    default: Any = None
    hint: str = ""


_Node = Union[_Value, _Section, _Tagged]


def _join(path: str, key: Any) -> str:
    """Dotted path of ``key`` under ``path``."""
    return f"{path}.{key}" if path else str(key)


def _describe_kinds(kinds: Sequence[str]) -> str:
    """``("integer", "mapping")`` -> ``"integer or mapping"``."""
    return " or ".join(kinds)


def _describe_value(value: Any) -> str:
    """A short description of a YAML value for error messages."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    names.update({dict: "mapping", list: "list", type(None): "null"})
    return f"{names.get(type(value), type(value).__name__)} {value!r}"


def _suggest(key: str, valid: Sequence[str]) -> str:
    """`` did you mean 'x'?`` for the closest valid key, or an empty string."""
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _fail(path: str, message: str, hint: str = "") -> InvalidConfigException:
    """The exception for a bad value at ``path``."""
    where = path or "experiment config"
    return InvalidConfigException(f"{where}: {message}{(' ' + hint) if hint else ''}")


def _type_error(path: str, kinds: Sequence[str], value: Any, hint: str = "") -> Exception:
    """The exception for ``value`` not being one of ``kinds``."""
    message = f"expected {_describe_kinds(kinds)}, got {_describe_value(value)}."
    return _fail(path, message, hint)


def _nested_keys(node: _Section) -> List[str]:
    """``child.key`` for the keys of the Sections directly under ``node``."""
    return [
        f"{name}.{key}"
        for name, child in node.fields.items()
        if isinstance(child, _Section) and not child.ignored
        for key in child.fields
    ]


def _unknown_key_error(path: str, key: Any, node: _Section) -> Exception:
    """The exception for a key the schema does not know, with the closest valid key."""
    valid = list(node.fields)
    suggestion = _suggest(str(key), valid)
    if not suggestion:  # a key one level too high, e.g. max_length outside searcher
        by_leaf = {name.rsplit(".", 1)[-1]: name for name in _nested_keys(node)}
        close = difflib.get_close_matches(str(key), list(by_leaf), n=1, cutoff=0.8)
        where = _join(path, by_leaf[close[0]]) if close else ""
        suggestion = f" Did you mean {where!r}?" if close else ""
    listing = ", ".join(sorted(valid))
    scope = f"under {path!r}" if path else "at the top level"
    return _fail(_join(path, key), f"unknown key.{suggestion} Valid keys {scope}: {listing}.")


def _validate(node: _Node, value: Any, path: str, ctx: _Context) -> Any:
    """Validate ``value`` against ``node``; return the value with defaults filled."""
    if isinstance(node, _Section):
        return _validate_section(node, value, path, ctx)
    if isinstance(node, _Tagged):
        return _validate_tagged(node, value, path, ctx)
    return _validate_value(node, value, path, ctx)


def _validate_value(node: _Value, value: Any, path: str, ctx: _Context) -> Any:
    """Check one leaf value."""
    if not any(_KIND_CHECKS[kind](value) for kind in node.kinds):
        raise _type_error(path, node.kinds, value, node.hint)
    if node.choices is not None and value not in node.choices:
        allowed = ", ".join(repr(c) for c in node.choices)
        choice_names = [str(c) for c in node.choices]
        suggestion = _suggest(value, choice_names) if isinstance(value, str) else ""
        raise _fail(path, f"{value!r} is not one of {allowed}.{suggestion}", node.hint)
    if node.minimum is not None and value < node.minimum:
        raise _fail(path, f"must be >= {node.minimum:g}, got {value!r}.", node.hint)
    if node.custom is not None:
        value = node.custom(value, path, ctx)
    if node.ignored:
        ctx.ignore(path)
    return copy.deepcopy(value)


def _accepts_null(node: _Node) -> bool:
    """Whether an explicit ``null`` is a real value for ``node`` (not "use the default")."""
    return isinstance(node, _Value) and "any" in node.kinds and not node.ignored


def _default_of(node: _Node, path: str, ctx: _Context) -> Any:
    """The value an absent key gets, or ``_NO_DEFAULT`` to leave it out."""
    if isinstance(node, _Section):
        if node.ignored or node.required:
            return _NO_DEFAULT
        return _validate_section(node, {}, path, ctx)
    if isinstance(node, _Tagged):
        return node.default
    if node.ignored or node.default is _NO_DEFAULT:
        return _NO_DEFAULT
    return copy.deepcopy(node.default)


def _validate_section(node: _Section, value: Any, path: str, ctx: _Context) -> Dict[str, Any]:
    """Check a mapping with fixed keys; fill the defaults of absent optional keys."""
    if not isinstance(value, dict):
        raise _type_error(path, ("mapping",), value, node.hint)
    for key in value:
        if key not in node.fields:
            raise _unknown_key_error(path, key, node)
    if node.ignored:
        ctx.ignore(path)
        return copy.deepcopy(value)
    out: Dict[str, Any] = {}
    for key, child in node.fields.items():
        child_path = _join(path, key)
        absent = key not in value or (value[key] is None and not _accepts_null(child))
        if absent and key in node.required:
            raise _fail(child_path, "required key is missing.", getattr(child, "hint", ""))
        if absent:
            default = _default_of(child, child_path, ctx)
            if default is not _NO_DEFAULT:
                out[key] = default
            continue
        out[key] = _validate(child, value[key], child_path, ctx)
    if node.check is not None:
        node.check(out, path)
    return out


def _validate_tagged(node: _Tagged, value: Any, path: str, ctx: _Context) -> Dict[str, Any]:
    """Check a mapping whose ``node.tag`` key chooses the Section for the rest."""
    if not isinstance(value, dict):
        raise _type_error(path, ("mapping",), value, node.hint)
    tag_path = _join(path, node.tag)
    choices = list(node.variants)
    tag = value.get(node.tag)
    if tag is None:
        raise _fail(tag_path, f"required key is missing; use one of {', '.join(choices)}.")
    if tag not in node.variants:
        suggestion = _suggest(str(tag), choices)
        raise _fail(tag_path, f"{tag!r} is not one of {', '.join(choices)}.{suggestion}")
    return _validate_section(node.variants[tag], value, path, ctx)


# --------------------------------------------------------------------------------------------
# Custom checks for the values the declarative nodes cannot express.
# --------------------------------------------------------------------------------------------

_UNITS = ("batches", "epochs", "records")


def _length_check(minimum: int, allow_int: bool) -> _Custom:
    """A check for a training length: ``{batches|epochs|records: N}`` (or a bare int)."""

    def check(value: Any, path: str, ctx: _Context) -> Any:
        """Validate one length value; return it normalized."""
        example = f"e.g. {path.rsplit('.', 1)[-1]}: {{batches: 1000}}"
        if allow_int and _KIND_CHECKS["integer"](value):
            return _check_length_number(value, path, minimum)
        if not isinstance(value, dict):
            kinds = ("integer", "mapping") if allow_int else ("mapping",)
            raise _type_error(path, kinds, value, f"Use {example}.")
        for key in value:
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
        {"type": _HP_TYPE, "minval": _Value(("integer",)), "maxval": _Value(("integer",)),
         "count": _HP_COUNT},
        required=("type", "minval", "maxval"),
        check=_check_ordered_bounds,
    ),
    "double": _Section(
        {"type": _HP_TYPE, "minval": _Value(("number",)), "maxval": _Value(("number",)),
         "count": _HP_COUNT},
        required=("type", "minval", "maxval"),
        check=_check_ordered_bounds,
    ),
    "log": _Section(
        {"type": _HP_TYPE, "minval": _Value(("number",)), "maxval": _Value(("number",)),
         "base": _Value(("number",)), "count": _HP_COUNT},
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
    "pbt", "async_halving", "adaptive", "adaptive_simple", "sync_halving", "custom",
)


def _check_searcher_name(value: Any, path: str, ctx: _Context) -> Any:
    """``searcher.name``: one of the searchers this package understands."""
    if value in _LOCAL_SEARCHERS:
        return value
    usable = ", ".join(_LOCAL_SEARCHERS)
    if value in _CLUSTER_ONLY_SEARCHERS:
        message = f"the {value!r} searcher needs a Determined cluster and is not run locally."
        raise _fail(path, message, f"Use one of {usable}.")
    raise _fail(path, f"{value!r} is not a searcher.{_suggest(value, _LOCAL_SEARCHERS)}",
                f"Use one of {usable}.")


def _check_searcher(section: Dict[str, Any], path: str) -> None:
    """Keys a particular searcher requires."""
    name = section["name"]
    if name in ("random", "adaptive_asha") and section.get("max_trials") is None:
        raise _fail(_join(path, "max_trials"), f"required by the {name!r} searcher.",
                    "Set how many trials to run, e.g. max_trials: 8.")


def _check_shared_fs(section: Dict[str, Any], path: str) -> None:
    """``storage_path`` must be relative or lie under ``host_path``."""
    storage = section.get("storage_path")
    if storage is None or not os.path.isabs(storage):
        return
    host = os.path.abspath(section["host_path"])
    if os.path.commonpath([host, os.path.abspath(storage)]) != host:
        raise _fail(_join(path, "storage_path"),
                    f"{storage!r} is neither relative nor inside host_path {host!r}.",
                    "Make it relative to host_path.")


# --------------------------------------------------------------------------------------------
# The experiment-config schema.
# --------------------------------------------------------------------------------------------


def _ignored(*kinds: str) -> _Value:
    """A key accepted for compatibility but with no local meaning."""
    return _Value(kinds, ignored=True)


def _length(default: Any, minimum: int, allow_int: bool = False) -> _Value:
    """A training-length key."""
    return _Value(("any",) if allow_int else ("mapping",), default=default,
                  custom=_length_check(minimum, allow_int),
                  hint=f"Use exactly one of {', '.join(_UNITS)}, e.g. {{batches: 1000}}.")


_SEARCHER = _Section(
    {
        "name": _Value(("string",), custom=_check_searcher_name,
                       hint=f"Use one of {', '.join(_LOCAL_SEARCHERS)}."),
        "metric": _Value(("string",), hint="Name the validation metric to optimize."),
        "smaller_is_better": _Value(("boolean",), default=True),
        "max_length": _length(None, minimum=1, allow_int=True),
        "max_trials": _Value(("integer",), minimum=1),
        "max_concurrent_trials": _Value(("integer",), minimum=0),
        "source_trial_id": _Value(("integer",), default=None),
        "source_checkpoint_uuid": _Value(("string",), default=None),
        # adaptive_asha settings (the searcher itself is refused when an experiment runs).
        "mode": _Value(("string",), choices=("aggressive", "standard", "conservative")),
        "divisor": _Value(("number",)),
        "max_rungs": _Value(("integer",), minimum=1),
        "bracket_rungs": _Value(("list",)),
        "time_metric": _Value(("string",)),
        "max_time": _Value(("integer",), minimum=1),
        "stop_once": _Value(("boolean",)),
    },
    required=("name", "metric"),
    check=_check_searcher,
    hint="e.g. searcher: {name: single, metric: validation_loss, max_length: {batches: 1000}}",
)

_SAVE_COUNTS = {
    "save_experiment_best": _Value(("integer",), minimum=0, default=0),
    "save_trial_best": _Value(("integer",), minimum=0, default=1),
    "save_trial_latest": _Value(("integer",), minimum=0, default=1),
}

_CLOUD_STORAGE = _Section(
    {key: _Value(("any",)) for key in (
        "type", "bucket", "prefix", "access_key", "secret_key", "endpoint_url", "container",
        "connection_string", "account_url", "credential", *_SAVE_COUNTS)},
    ignored=True,
)

_CHECKPOINT_STORAGE = _Tagged(
    tag="type",
    variants={
        "shared_fs": _Section(
            {"type": _Value(("string",)), "host_path": _Value(("string",)),
             "storage_path": _Value(("string",), default=None),
             "propagation": _ignored("string"), "container_path": _ignored("string"),
             "checkpoint_path": _ignored("string"), "tensorboard_path": _ignored("string"),
             **_SAVE_COUNTS},
            required=("type", "host_path"),
            check=_check_shared_fs,
        ),
        "directory": _Section(
            {"type": _Value(("string",)), "container_path": _Value(("string",)),
             **_SAVE_COUNTS},
            required=("type", "container_path"),
        ),
        "s3": _CLOUD_STORAGE,
        "gcs": _CLOUD_STORAGE,
        "azure": _CLOUD_STORAGE,
    },
)

_RESOURCES = _Section(
    {
        "slots_per_trial": _Value(("integer",), minimum=0, default=1),
        **{key: _ignored("any") for key in (
            "resource_pool", "priority", "max_slots", "weight", "shm_size", "agent_label",
            "devices", "native_parallel", "is_single_node", "slots")},
    },
)

_OPTIMIZATIONS = _Section(
    {
        "aggregation_frequency": _Value(("integer",), minimum=1, default=1),
        "average_aggregated_gradients": _Value(("boolean",), default=True),
        "average_training_metrics": _Value(("boolean",), default=False),
        "gradient_compression": _ignored("boolean"),
        "mixed_precision": _Value(("string",), choices=("O0", "O1", "O2", "O3"), ignored=True),
        "tensor_fusion_threshold": _ignored("integer"),
        "tensor_fusion_cycle_time": _ignored("integer"),
        "auto_tune_tensor_fusion": _ignored("boolean"),
    },
)

_EXPERIMENT = _Section(
    {
        "name": _Value(("string",), default=None),
        "description": _Value(("string",), default=None),
        "labels": _Value(("list",), default=[], custom=_check_string_list),
        "entrypoint": _Value(("any",), custom=_check_entrypoint, hint=_ENTRYPOINT_HINT),
        "hyperparameters": _Value(("mapping",), default={}, custom=_check_hparams),
        "searcher": _SEARCHER,
        "records_per_epoch": _Value(("integer",), minimum=0, default=0),
        "min_validation_period": _length({"batches": 0}, minimum=0),
        "min_checkpoint_period": _length({"batches": 0}, minimum=0),
        "checkpoint_storage": _CHECKPOINT_STORAGE,
        "checkpoint_policy": _Value(("string",), choices=("best", "all", "none"), default="best"),
        "resources": _RESOURCES,
        "optimizations": _OPTIMIZATIONS,
        "reproducibility": _Section({"experiment_seed": _Value(("integer",), default=None)}),
        "data": _Value(("mapping",), default={}),
        "perform_initial_validation": _Value(("boolean",), default=False),
        "scheduling_unit": _Value(("integer",), minimum=1, default=100),
        "debug": _Value(("boolean",), default=False),
        # Cluster-only keys: accepted so existing configs load, reported as ignored.
        "max_restarts": _Value(("integer",), minimum=0, ignored=True),
        "environment": _ignored("mapping"),
        "bind_mounts": _ignored("list"),
        "profiling": _ignored("mapping"),
        "workspace": _ignored("string"),
        "project": _ignored("string"),
        "pbs": _ignored("mapping"),
        "slurm": _ignored("mapping"),
        "data_layer": _ignored("mapping"),
        "security": _ignored("mapping"),
        "tensorboard_storage": _ignored("mapping"),
        "internal": _ignored("any"),
        "log_policies": _ignored("any"),
        "retention_policy": _ignored("mapping"),
        "integrations": _ignored("mapping"),
        "preemption_timeout": _ignored("integer"),
    },
    required=("entrypoint", "searcher"),
)


def _check_grid_counts(hparams: Dict[str, Any], path: str) -> None:
    """Under grid search every int/double/log hyperparameter needs a ``count``."""
    for key, value in hparams.items():
        item_path = _join(path, key)
        if not isinstance(value, dict):
            continue
        if "type" not in value:
            _check_grid_counts(value, item_path)
        elif value["type"] in ("int", "double", "log") and value.get("count") is None:
            raise _fail(item_path, f"grid search needs 'count' for this {value['type']!r} "
                        "hyperparameter (how many values to try from minval to maxval).",
                        "Add e.g. count: 3, or make it a 'const' or 'categorical'.")


# --------------------------------------------------------------------------------------------
# The public API.
# --------------------------------------------------------------------------------------------


class ExperimentConfig:
    """A validated experiment config with Determined's defaults filled in.

    Attributes:
        raw: the validated config (a plain dict) including defaults.
        ignored_keys: dotted paths of the keys that were accepted but have no local meaning.
    """

    def __init__(self, raw: Dict[str, Any], ignored_keys: List[str]) -> None:
        """Wrap an already-validated config; use :func:`load_config` to build one.

        Args:
            raw: the validated config.
            ignored_keys: paths of keys accepted but ignored locally.
        """
        self.raw = raw
        self.ignored_keys = list(ignored_keys)

    def __repr__(self) -> str:
        """Short form naming the entrypoint and searcher."""
        searcher = self.searcher["name"]
        return f"ExperimentConfig(entrypoint={self.entrypoint!r}, searcher={searcher!r})"

    @property
    def entrypoint(self) -> Union[str, List[str]]:
        """The ``entrypoint``: ``model_def:TrialClass`` or a command (string or argv list)."""
        value: Union[str, List[str]] = self.raw["entrypoint"]
        return value

    @property
    def hyperparameters(self) -> Dict[str, Any]:
        """The ``hyperparameters`` section: search spaces and constants, not sampled values."""
        value: Dict[str, Any] = self.raw["hyperparameters"]
        return value

    @property
    def searcher(self) -> Dict[str, Any]:
        """The ``searcher`` section."""
        value: Dict[str, Any] = self.raw["searcher"]
        return value

    def legacy_trial_class(self) -> Optional[str]:
        """The ``module:Class`` entrypoint, or None when the entrypoint is a command.

        Returns:
            The entrypoint string when it names a trial class the way Determined detects it.
        """
        entrypoint = self.entrypoint
        if isinstance(entrypoint, str) and _LEGACY_ENTRYPOINT.match(entrypoint.strip()):
            return entrypoint.strip()
        return None

    def max_length(self) -> Optional[Tuple[int, Optional[str]]]:
        """``searcher.max_length`` as ``(value, unit)``.

        Returns:
            ``(n, "batches"|"epochs"|"records")``; ``(n, None)`` for the unit-less integer form
            (the training code decides the unit, as in Determined); None when absent.
        """
        value = self.searcher.get("max_length")
        if value is None:
            return None
        if isinstance(value, int):
            return value, None
        unit, number = next(iter(value.items()))
        return number, unit

    def _period(self, key: str) -> Optional[Tuple[int, str]]:
        """A ``{unit: n}`` period as ``(n, unit)``, None when it is 0 (never)."""
        unit, number = next(iter(self.raw[key].items()))
        return (number, unit) if number > 0 else None

    def min_validation_period(self) -> Optional[Tuple[int, str]]:
        """``min_validation_period`` as ``(value, unit)``, None when unset or 0."""
        return self._period("min_validation_period")

    def min_checkpoint_period(self) -> Optional[Tuple[int, str]]:
        """``min_checkpoint_period`` as ``(value, unit)``, None when unset or 0."""
        return self._period("min_checkpoint_period")

    def checkpoint_dir(self) -> Optional[str]:
        """Where checkpoints go according to ``checkpoint_storage``.

        Returns:
            ``host_path`` joined with ``storage_path`` for ``shared_fs``, ``container_path``
            for ``directory``, or None (unset, or a cloud type, which is ignored locally).
        """
        storage = self.raw.get("checkpoint_storage")
        if not storage:
            return None
        if storage["type"] == "shared_fs":
            return os.path.join(storage["host_path"], storage.get("storage_path") or "")
        if storage["type"] == "directory":
            return str(storage["container_path"])
        return None

    def slots_per_trial(self) -> int:
        """``resources.slots_per_trial`` (default 1)."""
        return int(self.raw["resources"]["slots_per_trial"])

    def aggregation_frequency(self) -> int:
        """``optimizations.aggregation_frequency`` (default 1)."""
        return int(self.raw["optimizations"]["aggregation_frequency"])

    def experiment_seed(self) -> Optional[int]:
        """``reproducibility.experiment_seed``; None means "do not seed" (see module notes)."""
        seed = self.raw["reproducibility"]["experiment_seed"]
        return None if seed is None else int(seed)

    def records_per_epoch(self) -> Optional[int]:
        """``records_per_epoch``, or None when unset (0)."""
        value = int(self.raw["records_per_epoch"])
        return value or None

    def trial_hparams(self) -> List[Dict[str, Any]]:
        """The hyperparameter values of each trial the searcher would create.

        ``single`` samples once, ``random`` samples ``max_trials`` times (seeded by
        ``experiment_seed``), ``grid`` enumerates the grid.

        Returns:
            One dict of hyperparameter values per trial.

        Raises:
            InvalidConfigException: the searcher is ``adaptive_asha``, which is not run locally.
        """
        name = self.searcher["name"]
        if name == "grid":
            return grid_points(self.hyperparameters)
        if name == "random":
            return random_points(self.hyperparameters, self.searcher["max_trials"],
                                 self.experiment_seed())
        if name == "single":
            return random_points(self.hyperparameters, 1, self.experiment_seed())
        raise _fail("searcher.name", f"the {name!r} searcher is not run locally.",
                    "Use single, grid or random.")


def _read_yaml(path: Union[str, "os.PathLike[str]"]) -> Any:
    """Parse a YAML file into Python values."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        message = f"cannot read experiment config {str(path)!r}: {exc}"
        raise InvalidConfigException(message) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidConfigException(f"{str(path)!r} is not valid YAML: {exc}") from exc


def validate_config(config: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """Validate a config dict without logging.

    Args:
        config: the parsed experiment config.

    Returns:
        The config with defaults filled, and the paths of the ignored keys.

    Raises:
        InvalidConfigException: an unknown key, a wrong type, or a missing required key.
    """
    if not isinstance(config, dict):
        raise _type_error("", ("mapping",), config, "An experiment config is a YAML mapping.")
    ctx = _Context()
    raw = _validate_section(_EXPERIMENT, config, "", ctx)
    if raw["searcher"]["name"] == "grid":
        _check_grid_counts(raw["hyperparameters"], "hyperparameters")
    return raw, ctx.ignored


def load_config(source: Union[str, "os.PathLike[str]", Dict[str, Any]]) -> ExperimentConfig:
    """Load and validate a Determined experiment config.

    Keys with no local meaning are reported in ``ignored_keys`` and in one logged warning.

    Args:
        source: a path to a YAML file, or an already-parsed config dict (not modified).

    Returns:
        The validated config.

    Raises:
        InvalidConfigException: the file cannot be read or parsed, or the config is invalid.
    """
    if isinstance(source, (str, os.PathLike)):
        config = _read_yaml(source)
    else:
        config = source
    raw, ignored = validate_config(config)
    if ignored:
        logger.warning(
            "These experiment-config keys only matter on a Determined cluster and are "
            "ignored when running locally: %s",
            ", ".join(ignored),
        )
    return ExperimentConfig(raw, ignored)


# --------------------------------------------------------------------------------------------
# Hyperparameter search expansion.
# --------------------------------------------------------------------------------------------

_Leaf = Tuple[Tuple[str, ...], Any]


def _flatten(hparams: Dict[str, Any], prefix: Tuple[str, ...] = ()) -> List[_Leaf]:
    """``(path, spec)`` for every leaf hyperparameter, in config order."""
    leaves: List[_Leaf] = []
    for key, value in hparams.items():
        path = prefix + (key,)
        if isinstance(value, dict) and value and "type" not in value:
            leaves.extend(_flatten(value, path))
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
    """``count`` evenly spaced values from minval to maxval inclusive (midpoint if count 1)."""
    if count == 1:
        return [(minval + maxval) / 2.0]
    return [minval + i * (maxval - minval) / (count - 1) for i in range(count)]


def _grid_axis(spec: Any, path: str) -> List[Any]:
    """The values a grid search tries for one hyperparameter."""
    if not isinstance(spec, dict) or "type" not in spec:
        return [spec]
    kind = spec["type"]
    if kind == "const":
        return [spec["val"]]
    if kind == "categorical":
        return list(spec["vals"])
    if spec.get("count") is None:
        raise _fail(path, f"grid search needs 'count' for this {kind!r} hyperparameter.",
                    "Add e.g. count: 3, or make it a 'const' or 'categorical'.")
    if kind == "int":
        count = min(spec["count"], spec["maxval"] - spec["minval"] + 1)
        values = [_round_half_away(v) for v in _spaced(spec["minval"], spec["maxval"], count)]
        return list(dict.fromkeys(values))
    points = _spaced(float(spec["minval"]), float(spec["maxval"]), spec["count"])
    if kind == "log":
        return [float(spec["base"]) ** p for p in points]
    return points


def _checked_hparams(hparams: Dict[str, Any]) -> Dict[str, Any]:
    """Validate a ``hyperparameters`` section on its own."""
    checked: Dict[str, Any] = _check_hparams(hparams, "hyperparameters", _Context())
    return checked


def grid_points(hparams: Dict[str, Any]) -> List[Dict[str, Any]]:
    """All hyperparameter combinations of a grid search (Determined's grid semantics).

    The first hyperparameter varies slowest. Nested groups come back nested.

    Args:
        hparams: a ``hyperparameters`` section.

    Returns:
        One dict of values per grid point (``[{}]`` when there are no hyperparameters).

    Raises:
        InvalidConfigException: the section is invalid, or an int/double/log lacks ``count``.
    """
    leaves = _flatten(_checked_hparams(hparams))
    paths = [path for path, _ in leaves]
    axes = [_grid_axis(spec, "hyperparameters." + ".".join(path)) for path, spec in leaves]
    return [_unflatten(list(zip(paths, combo))) for combo in itertools.product(*axes)]


def _sample(spec: Any, rng: random.Random) -> Any:
    """One random value for one hyperparameter (Determined's sampling rules)."""
    if not isinstance(spec, dict) or "type" not in spec:
        return spec
    kind = spec["type"]
    if kind == "const":
        return spec["val"]
    if kind == "categorical":
        return spec["vals"][rng.randrange(len(spec["vals"]))]
    if kind == "int":
        return rng.randrange(spec["minval"], spec["maxval"])
    value = rng.uniform(float(spec["minval"]), float(spec["maxval"]))
    if kind == "log":
        return float(spec["base"]) ** value
    return value


def random_points(
    hparams: Dict[str, Any], max_trials: int, seed: Optional[int] = None
) -> List[Dict[str, Any]]:
    """``max_trials`` random hyperparameter samples, repeatable for a given seed.

    ``int`` is drawn from ``[minval, maxval)``, ``double`` uniformly from ``[minval, maxval]``,
    ``log`` as ``base ** uniform(minval, maxval)``, ``categorical`` uniformly from ``vals``.

    Args:
        hparams: a ``hyperparameters`` section.
        max_trials: how many samples to draw.
        seed: seed for the sampler; None draws from system randomness.

    Returns:
        One dict of values per trial.

    Raises:
        InvalidConfigException: the section is invalid or ``max_trials`` is not positive.
    """
    if not _KIND_CHECKS["integer"](max_trials) or max_trials < 1:
        raise _fail("searcher.max_trials", f"must be a positive integer, got {max_trials!r}.")
    leaves = _flatten(_checked_hparams(hparams))
    rng = random.Random(seed)
    return [
        _unflatten([(path, _sample(spec, rng)) for path, spec in leaves])
        for _ in range(max_trials)
    ]


__all__ = [
    "ExperimentConfig",
    "grid_points",
    "load_config",
    "random_points",
    "validate_config",
]
