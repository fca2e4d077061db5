"""How Determined's harness reads an experiment config's entrypoint.

* ``entrypoint: model_def:TrialClass`` (the legacy form): the class is imported from the model
  directory (:func:`load_trial_class`) and trained with
  ``Trainer.fit(**config.lengths.fit_lengths(hparams))``, the lengths and periods Determined's
  ``exec/harness.py`` derives from the config (``config._lengths``).
* ``entrypoint: python3 train.py ...``, optionally behind ``python3 -m determined.launch.X``:
  :func:`parse_command` turns it into ``det-lightning run`` arguments. A launcher's
  ``--trial model_def:TrialClass`` is the legacy form again.
"""

import importlib
import os
import shlex
from typing import Any, List, Union

from det_lightning import errors
from det_lightning.pytorch import PyTorchTrial

_PYTHON_NAMES = ("python", "python3")
_INTERPRETER_FLAGS = ("-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-q")
_DETERMINED_LAUNCHERS = (
    "determined.launch.torch_distributed",
    "determined.launch.horovod",
    "determined.launch.deepspeed",
)


def _is_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11``, ``/usr/bin/python3``."""
    name = os.path.basename(word)
    return name in _PYTHON_NAMES or name.startswith("python3.")


def _after_launcher(words: List[str]) -> List[str]:
    """What a Determined launch layer (``-m determined.launch.X``) would start.

    ``--trial model_def:Trial`` becomes the legacy form ``["--trial", spec]``; otherwise the
    wrapped command, found after ``--`` or at the first ``python``/``*.py`` word.
    """
    for index, word in enumerate(words):
        if word == "--trial" and index + 1 < len(words):
            return ["--trial", words[index + 1]]
        if word.startswith("--trial="):
            return ["--trial", word.split("=", 1)[1]]
        if word == "--":
            return words[index + 1 :]
        if _is_python(word) or word.endswith(".py"):
            return words[index:]
    return []


def parse_command(entrypoint: Union[str, List[str]]) -> Union[str, List[str]]:
    """A command entrypoint as ``det-lightning run`` arguments, or a ``module:Class`` string.

    >>> parse_command("python3 train.py --epochs 2")
    ['train.py', '--epochs', '2']
    >>> parse_command("python3 -m determined.launch.torch_distributed python3 train.py")
    ['train.py']
    >>> parse_command("python3 -m determined.launch.horovod --trial model_def:MyTrial")
    'model_def:MyTrial'

    Raises:
        errors.InvalidConfigException: not a Python command.
    """
    words = shlex.split(entrypoint) if isinstance(entrypoint, str) else list(entrypoint)
    original = words
    while words and _is_python(words[0]):
        words = words[1:]
        while words[:1] and words[0] in _INTERPRETER_FLAGS:  # `python3 -u train.py`
            words = words[1:]
        if words[:1] == ["-m"] and len(words) > 1 and words[1] in _DETERMINED_LAUNCHERS:
            words = _after_launcher(words[2:])
        if words[:1] == ["--trial"]:
            return words[1]
        if words[:1] == ["-m"] and len(words) > 1:
            return words  # `run -m package.module args`
        if words and words[0].endswith(".py"):
            return words
    raise errors.InvalidConfigException(
        f"entrypoint: {shlex.join(original)!r} is not run locally. Use 'model_def:TrialClass', "
        "or a Python command such as 'python3 train.py' (optionally behind "
        "'python3 -m determined.launch.torch_distributed'): det-lightning runs it with "
        "`import determined` aliased to det_lightning."
    )


def runs_once_per_node(entrypoint: Union[str, List[str]]) -> bool:
    """Whether Determined runs the command once per node: a Python command that no Determined
    launcher (``-m determined.launch.X``) starts once per slot.

    >>> runs_once_per_node("python3 4_distributed.py launcher")
    True
    >>> runs_once_per_node("python3 -u -m determined.launch.torch_distributed python3 t.py")
    False
    """
    words = shlex.split(entrypoint) if isinstance(entrypoint, str) else list(entrypoint)
    while words and (_is_python(words[0]) or words[0] in _INTERPRETER_FLAGS):
        words = words[1:]
    return not (words[:1] == ["-m"] and len(words) > 1 and words[1] in _DETERMINED_LAUNCHERS)


def load_trial_class(spec: str) -> type:
    """Imports ``module:Qual.Name`` (from the model directory, already on ``sys.path``).

    Raises:
        errors.InvalidConfigException: the module or class is missing, or is not a PyTorchTrial.
    """
    module_name, _, qualname = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise errors.InvalidConfigException(
            f"entrypoint: {spec!r}: no module {module_name!r} in the model directory."
        ) from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise errors.InvalidConfigException(
                f"entrypoint: {spec!r}: {module_name} has no attribute {qualname!r}."
            )
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, PyTorchTrial)):
        raise errors.InvalidConfigException(
            f"entrypoint: {spec!r} is not a PyTorchTrial subclass; det-lightning runs "
            "determined.pytorch.PyTorchTrial code."
        )
    return obj


__all__ = ["load_trial_class", "parse_command", "runs_once_per_node"]
