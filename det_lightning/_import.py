"""``import_from_path``: import a module from a directory without disturbing the current ones."""

import contextlib
import os
import pathlib
import sys
import types
from typing import Dict, Iterator, List, Set, Union


def _modules_from_dir(path: str) -> Dict[str, types.ModuleType]:
    """The loaded modules whose file lies directly in ``path`` (or are packages there)."""
    found = {}
    for name, module in list(sys.modules.items()):
        module_file = getattr(module, "__file__", None)
        if not module_file:
            continue
        parent = os.path.dirname(os.path.abspath(module_file))
        if os.path.basename(module_file) == "__init__.py":
            parent = os.path.dirname(parent)
        if parent == path or name.split(".")[0] in found:
            found[name] = module
    return found


def _shadowed_names(path: str) -> set:
    """Top-level names that a module or package in ``path`` would take."""
    names = set()
    for entry in os.listdir(path):
        stem, ext = os.path.splitext(entry)
        if ext == ".py" or os.path.isfile(os.path.join(path, entry, "__init__.py")):
            names.add(stem)
    return names


_PROJECT_DIRS: List[str] = []  # the directories import_from_path blocks put on sys.path now


def _project_dirs() -> Set[str]:
    """The running project's own directories: the main script's, the working directory, and
    the ones ``import_from_path`` added."""
    dirs = {os.getcwd(), *_PROJECT_DIRS}
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file:
        dirs.add(os.path.dirname(os.path.abspath(main_file)))
    return dirs


@contextlib.contextmanager
def without_project_modules() -> Iterator[None]:
    """Inside the block, imports see neither the project's directories on ``sys.path`` nor the
    modules already loaded from them (det_lightning's own aside).

    Installed packages probe for their optional dependencies while they import (torchmetrics
    asks ``find_spec("torchvision")``, ``import matplotlib.axes``); a project folder with its
    own ``torchvision/`` package or ``matplotlib.py`` shim must not answer them. Afterwards
    ``sys.path`` and the project's modules are as before.
    """
    dirs = _project_dirs()
    saved_path = list(sys.path)
    stashed = {
        name: module
        for path in dirs
        for name, module in _modules_from_dir(path).items()
        if name.split(".")[0] != "det_lightning"
    }
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) not in dirs]
    for name in stashed:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.path[:] = saved_path
        sys.modules.update(stashed)


@contextlib.contextmanager
def import_from_path(path: Union[str, "os.PathLike[str]"]) -> Iterator[None]:
    """Imports inside the block resolve against ``path`` first, even for names already imported
    from elsewhere (a checkpoint's ``model_def`` next to the current one). Afterwards the modules
    loaded from ``path`` are dropped and the ones they shadowed are restored.

    Args:
        path: directory holding the modules to import.
    """
    path = os.path.abspath(str(pathlib.Path(path)))
    shadowed = _shadowed_names(path) if os.path.isdir(path) else set()
    stashed = {
        name: module for name, module in sys.modules.items() if name.split(".")[0] in shadowed
    }
    for name in stashed:
        del sys.modules[name]
    sys.path.insert(0, path)
    _PROJECT_DIRS.append(path)
    try:
        yield
    finally:
        _PROJECT_DIRS.remove(path)
        with contextlib.suppress(ValueError):
            sys.path.remove(path)
        for name in _modules_from_dir(path):
            sys.modules.pop(name, None)
        sys.modules.update(stashed)
