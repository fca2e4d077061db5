"""``determined.experimental.client``, without a master.

Code imports it (``from determined.experimental import client``) and may name its classes in
annotations; every call raises ``NotImplementedError`` saying what to use locally. Any name
Determined's client has is importable (``from determined.experimental.client import X``).
"""

from typing import Any, Dict, NoReturn

_LOCAL = (
    "Locally, load a checkpoint with det_lightning.pytorch.load_trial_from_checkpoint_path(path, "
    "trial_class=...), and run experiments with `det-lightning experiment CONFIG MODEL_DIR`."
)


def _refuse(name: str) -> NoReturn:
    raise NotImplementedError(
        f"determined.experimental.client.{name} talks to a Determined master; det_lightning "
        f"runs without one. {_LOCAL}"
    )


class _NeedsMaster:
    """A client class: usable in annotations and isinstance checks, never constructed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse(type(self).__name__)


class Determined(_NeedsMaster):
    pass


class Checkpoint(_NeedsMaster):
    pass


class Experiment(_NeedsMaster):
    pass


class Trial(_NeedsMaster):
    pass


class Model(_NeedsMaster):
    pass


class ModelVersion(_NeedsMaster):
    pass


class Project(_NeedsMaster):
    pass


_FUNCTIONS: Dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """``client.login``, ``client.get_checkpoint`` and the rest: callables that refuse."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _FUNCTIONS:

        def needs_master(*args: Any, **kwargs: Any) -> NoReturn:
            _refuse(name)

        needs_master.__name__ = needs_master.__qualname__ = name
        _FUNCTIONS[name] = needs_master
    return _FUNCTIONS[name]
