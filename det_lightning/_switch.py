"""On/off settings given as a ``Trainer`` argument or, when that is None, an environment
variable (a leaf module: it imports nothing of ours)."""

import os
from typing import Optional

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def switch(option: Optional[bool], argument: str, env: str, *, on: str, off: str) -> bool:
    """``option`` when given, else whether ``$env`` is set to a true value (unset: False).

    Args:
        option: the ``Trainer`` argument's value.
        argument: its name, for the error message.
        env: the environment variable read when ``option`` is None.
        on, off: what 1 and 0 mean, for the error message.

    Raises:
        TypeError: ``option`` is not a bool or None.
        ValueError: the variable holds something else than 1/0 (true/false, yes/no, on/off).

    >>> switch(True, "x", "UNSET", on="", off=""), switch(None, "x", "UNSET", on="", off="")
    (True, False)
    """
    if option is not None:
        if not isinstance(option, bool):
            raise TypeError(
                f"Trainer({argument}={option!r}): expected True, False or None "
                f"(None: ${env} decides)."
            )
        return option
    value = os.environ.get(env, "").strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(f"{env}={value!r}: expected 1 ({on}) or 0 ({off}).")
    return value in _TRUE
