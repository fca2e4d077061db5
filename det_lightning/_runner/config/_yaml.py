"""Experiment configs read as Determined reads them: YAML 1.2 scalars, not PyYAML's YAML 1.1.

Determined parses configs with ruamel.yaml (``typ="safe"``), whose scalar rules follow YAML 1.2.
PyYAML follows YAML 1.1, and the two disagree on values configs contain::

    value        YAML 1.1 (PyYAML)       YAML 1.2 (Determined)
    1e-4         "1e-4" (a string)       0.0001
    yes, on, n   True / False            "yes", "on", "n" (strings)
    017          15 (octal)              17
    0o17         "0o17"                  15
    1:20         80 (base 60)            "1:20"

``Yaml12Loader`` is PyYAML's safe loader with the bool, int and float rules replaced; the rest
(strings, nulls, timestamps, merge keys) is the same in both versions.
"""

import re
from typing import Any

import yaml

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
# Decimal, 0o octal, 0x hexadecimal and 0b binary; ruamel also allows "_" between digits.
_INT = re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+|[-+]?0b[01_]+)$")
_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?   # 1.5, 1., 1.0e-4
          |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+                   # 1e-4, 5E3
          |\.[0-9_]+(?:[eE][-+][0-9]+)?                        # .5, .5e-3
          |[-+]?\.(?:inf|Inf|INF)
          |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class Yaml12Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2's booleans, integers and floats.

    >>> yaml.load("lr: 1e-4\\nflag: yes\\nmode: on\\nn: 017\\nm: 0o17\\nt: 1:20", Yaml12Loader)
    {'lr': 0.0001, 'flag': 'yes', 'mode': 'on', 'n': 17, 'm': 15, 't': '1:20'}
    >>> yaml.load("[true, False, 1_000, 0x1F, -.inf, 2.5, +1, .5]", Yaml12Loader)
    [True, False, 1000, 31, -inf, 2.5, 1, 0.5]
    """


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    for prefix, base in (("0o", 8), ("0x", 16), ("0b", 2)):
        if digits.startswith(prefix):
            return sign * int(digits[2:], base)
    return sign * int(digits, 10)  # "017" is seventeen in YAML 1.2


def _remove_resolvers(loader: Any, tags: "set[str]") -> None:
    # PyYAML keeps resolvers per first character in a class-level dict shared with SafeLoader;
    # copy it before editing so SafeLoader itself is left alone.
    loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in tags]
        for first, resolvers in loader.yaml_implicit_resolvers.items()
    }


_remove_resolvers(
    Yaml12Loader,
    {
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
    },
)
Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_yaml12(text: str) -> Any:
    """Parses ``text`` with YAML 1.2 scalar rules, as Determined reads experiment configs.

    >>> load_yaml12("hyperparameters:\\n  lr: 5e-4\\n")
    {'hyperparameters': {'lr': 0.0005}}
    """
    return yaml.load(text, Loader=Yaml12Loader)  # noqa: S506 (a SafeLoader subclass)
