"""``det-lightning experiment --config KEY=VALUE``: config overrides as ``det experiment create``
reads them (Determined's ``determined/cli/ntsc.py: parse_config_overrides``)::

    --config searcher.max_length.batches=100      # dotted key: nested mappings
    --config hyperparameters.lr=1e-3              # a YAML 1.2 scalar: 0.001
    --config labels=a,b                           # a comma: a list ['a', 'b']
    --config 'bind_mounts=[{host_path: /d, container_path: /d}]'   # [ or {: YAML flow

Each override is merged into the config as Determined merges it (a mapping into a mapping, key
by key; anything else replaces), then the whole config is validated: an unknown key gets the
schema's own error, with its closest valid key. Where the schema wants a string and YAML read
the text as a number or a boolean (``name=2024``, ``searcher.metric=1e-3``), the text is kept.
"""

import copy
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import yaml

from det_lightning._runner.config import ExperimentConfig, load_config
from det_lightning._runner.config._experiment_config import _read_yaml
from det_lightning._runner.config._nodes import _Section, _Value
from det_lightning._runner.config._schema import _EXPERIMENT
from det_lightning._runner.config._yaml import load_yaml12
from det_lightning.errors import InvalidConfigException

# Determined turns a single value of these into a one-element list (ntsc.py).
_COERCE_TO_LIST = {"bind_mounts"}

HELP = (
    "override a config key, as det experiment create --config does: KEY=VALUE with a dotted "
    "KEY (searcher.max_length.batches=100, hyperparameters.lr=0.1); VALUE is read as YAML "
    "(a comma makes a list); repeatable"
)


def parse_value(key: str, text: str) -> Any:
    """``text`` as Determined reads an override's value, typed by the schema at ``key``.

    >>> parse_value("hyperparameters.lr", "1e-3"), parse_value("debug", "true")
    (0.001, True)
    >>> parse_value("labels", "a,b"), parse_value("name", "2024")
    (['a', 'b'], '2024')
    """
    if text.startswith(("[", "{")):
        value = load_yaml12(text)
        return [value] if key in _COERCE_TO_LIST and text.startswith("{") else value
    if "," in text:
        return [_scalar(key, part) for part in text.split(",")]
    value = _scalar(key, text)
    return [value] if key in _COERCE_TO_LIST else value


def _scalar(key: str, text: str) -> Any:
    value = load_yaml12(text) if text else ""
    node = _schema_node(key)
    wants_string = isinstance(node, _Value) and node.kinds == ("string",)
    if wants_string and isinstance(value, (bool, int, float)):
        return text
    return value


def _schema_node(key: str) -> Optional[Any]:
    """The schema's node at a dotted ``key``, or None where the schema does not fix one."""
    node: Any = _EXPERIMENT
    for part in key.split("."):
        if not isinstance(node, _Section) or part not in node.fields:
            return None
        node = node.fields[part]
    return node


def _merge(base: Dict[str, Any], source: Dict[str, Any]) -> Dict[str, Any]:
    """Determined's ``util.merge_dicts``: ``source`` into a copy of ``base``."""
    merged = copy.deepcopy(base)
    for key, value in source.items():
        if isinstance(base.get(key), dict) and isinstance(value, dict):
            merged[key] = _merge(base[key], value)
        else:
            merged[key] = value
    return merged


def _nested(key: str, value: Any) -> Dict[str, Any]:
    """``a.b.c``, v -> ``{a: {b: {c: v}}}``."""
    result: Dict[str, Any] = {}
    target = result
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value
    return result


def apply_overrides(config: Dict[str, Any], overrides: Iterable[str]) -> Dict[str, Any]:
    """``config`` with each ``KEY=VALUE`` of ``overrides`` merged in (``config`` is left alone).

    >>> apply_overrides({"searcher": {"name": "single", "max_length": {"batches": 9}}},
    ...                 ["searcher.max_length.batches=100"])
    {'searcher': {'name': 'single', 'max_length': {'batches': 100}}}

    Raises:
        InvalidConfigException: an override without ``=`` or with an empty key.
    """
    result = copy.deepcopy(config)
    for override in overrides:
        key, sep, text = override.partition("=")
        parts: List[str] = key.strip().split(".")
        if not sep or not all(parts):
            raise InvalidConfigException(
                f"--config {override!r}: expected KEY=VALUE with a dotted KEY, e.g. "
                "searcher.max_length.batches=100 or hyperparameters.lr=0.1."
            )
        key = ".".join(parts)
        try:
            value = parse_value(key, text)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise InvalidConfigException(
                f"--config {override!r}: VALUE is not YAML: {problem}"
            ) from e
        # A key present with no value (`slurm:`) is None in the file: Determined merges into {}.
        _fill_none(result, parts)
        result = _merge(result, _nested(key, value))
    return result


def _fill_none(config: Dict[str, Any], parts: List[str]) -> None:
    node: Any = config
    for part in parts[:-1]:
        if not isinstance(node, dict):
            return
        if node.get(part) is None and part in node:
            node[part] = {}
        node = node.get(part)


def load_with_overrides(
    path: Union[str, "os.PathLike[str]"], overrides: Sequence[str], announce: bool = True
) -> ExperimentConfig:
    """The experiment config at ``path`` with ``overrides`` applied, validated.

    Raises:
        InvalidConfigException: the file, an override, or the config that results is invalid.
    """
    if not overrides:
        return load_config(path, announce=announce)
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        return load_config(raw, announce=announce)  # the schema's own error
    try:
        return load_config(apply_overrides(raw, overrides), announce=announce)
    except InvalidConfigException as e:
        culprit = _override_at(str(e).split(":", 1)[0], overrides)
        if culprit is None:
            raise
        raise InvalidConfigException(f"--config {culprit!r}: {e}") from None


def _override_at(path: str, overrides: Sequence[str]) -> Optional[str]:
    """The last of ``overrides`` that set the key ``path`` names, a key under it, or a section
    above it; None when the file's own keys are at fault.

    >>> _override_at("searcher.max_lenght", ["hyperparameters.lr=0.1", "searcher.max_lenght=5"])
    'searcher.max_lenght=5'
    >>> _override_at("searcher.max_length.batches", ["searcher.max_length={batches: 0}"])
    'searcher.max_length={batches: 0}'
    >>> _override_at("entrypoint", ["searcher.max_length.batches=5"]) is None
    True
    """
    for override in reversed(overrides):
        key = ".".join(part.strip() for part in override.partition("=")[0].strip().split("."))
        if path == key or path.startswith(key + ".") or key.startswith(path + "."):
            return override
    return None


__all__ = ["HELP", "apply_overrides", "load_with_overrides", "parse_value"]
