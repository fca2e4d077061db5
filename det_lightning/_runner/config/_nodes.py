"""A tiny declarative schema and its validator.

Three node kinds describe a config: :class:`_Value` (a leaf), :class:`_Section` (a mapping
with fixed keys) and :class:`_Tagged` (a mapping whose ``type`` key picks one of several
Sections). :func:`_validate` checks a value against a node, fills defaults, records keys that
are accepted but ignored locally, and raises ``InvalidConfigException`` naming the key's path.
"""

import copy
import dataclasses
import difflib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from det_lightning.errors import InvalidConfigException

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
    """A leaf: one of ``kinds``, optionally restricted to ``choices``, ``>= minimum`` or
    ``<= maximum``."""

    kinds: Tuple[str, ...]
    default: Any = _NO_DEFAULT
    choices: Optional[Tuple[Any, ...]] = None
    minimum: Optional[float] = None
    maximum: Optional[int] = None
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
    """A mapping whose ``tag`` key selects which Section validates the rest; without the
    tag, ``untagged`` (when given) validates a mapping of only the keys all variants share."""

    tag: str
    variants: Mapping[str, _Section]
    default: Any = None
    hint: str = ""
    untagged: Optional[_Section] = None


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


# Keys of Determined's configs before 0.12 (training counted in steps of batches_per_step
# batches, trials with build_model/optimizer(model)), and what replaced them.
_PRE_012 = {
    "batches_per_step": "set scheduling_unit: N (batches between training metric reports) and "
    "give every length in batches, records or epochs",
    "max_steps": "use searcher.max_length: {batches: STEPS * batches_per_step}",
    "steps": "use {batches: STEPS * batches_per_step}",
    "target_trial_steps": "use searcher.max_length: {batches: STEPS * batches_per_step}",
    "step_budget": "use searcher.max_trials and searcher.max_length",
}


def legacy_key_error(path: str) -> Optional[InvalidConfigException]:
    """The error for a key of a pre-0.12 config at ``path``, saying what replaced it; else None.

    >>> str(legacy_key_error("searcher.max_steps")).split(":")[0]
    'searcher.max_steps'
    """
    replacement = _PRE_012.get(path.rsplit(".", 1)[-1])
    if replacement is None:
        return None
    return _fail(
        path,
        (
            "this key is from Determined's experiment configs before 0.12 (training counted in "
            "steps; trials with build_model() and optimizer(model)), which det_lightning does not "
            f"read: {replacement}. A trial of that era also needs the PyTorchTrial API of "
            "Determined 0.12 and later (wrap_model/wrap_optimizer in __init__, "
            "train_batch(batch, epoch_idx, batch_idx))."
        ),
    )


def _unknown_key_error(path: str, key: Any, node: _Section) -> Exception:
    """The exception for a key the schema does not know, with the closest valid key."""
    legacy = legacy_key_error(_join(path, key))
    if legacy is not None:
        return legacy
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
    if node.maximum is not None and value > node.maximum:
        raise _fail(path, f"must be <= {node.maximum}, got {value!r}.", node.hint)
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
    if tag is None and node.untagged is not None and set(value) <= {*node.untagged.fields}:
        return _validate_section(node.untagged, value, path, ctx)
    if tag is None:
        hint = node.untagged.hint if node.untagged is not None else ""
        raise _fail(tag_path, f"required key is missing; use one of {', '.join(choices)}.", hint)
    if tag not in node.variants:
        suggestion = _suggest(str(tag), choices)
        raise _fail(tag_path, f"{tag!r} is not one of {', '.join(choices)}.{suggestion}")
    return _validate_section(node.variants[tag], value, path, ctx)
