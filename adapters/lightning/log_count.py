"""How often ``self.log`` ran on a module: the lean loops (``lean.py``, ``lean_validation.py``)
and the progress bar recompute the logged metrics after a batch only when the count moved.

``counter(module)`` gives the module's ``LogCount``, putting it first (once) on the instance in
place of ``log``: every ``self.log`` (ours, ``log_dict``'s, a Lightning callback's on the module)
goes through it into Lightning's own ``log``. The module's class knows nothing of it.

>>> import lightning.pytorch as pl
>>> module = pl.LightningModule()
>>> count = counter(module)
>>> count.calls, counter(module) is count
(0, True)
"""

from typing import Any, Callable

import lightning.pytorch as pl


class LogCount:
    """A module's ``log``, counting its calls (``calls``) before it makes each."""

    __slots__ = ("calls", "_log")

    def __init__(self, log: Callable[..., None]) -> None:
        self.calls = 0
        self._log = log

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        self._log(*args, **kwargs)


def counter(module: pl.LightningModule) -> LogCount:
    """``module``'s ``LogCount``, installed on the instance the first time (its class's ``log``
    runs inside it)."""
    fields = module.__dict__  # (a plain attribute: no nn.Module.__setattr__ checks needed)
    found = fields.get("log")
    if type(found) is LogCount:
        return found
    count = fields["log"] = LogCount(module.log)
    return count
