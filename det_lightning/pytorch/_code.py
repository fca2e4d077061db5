"""What a checkpoint's ``code/`` holds: the trial's source, for importing its class later.

Determined copies the working directory. We copy the top-level package of the trial's module
(``pkg`` for ``pkg.models.trial``), or the directory of a top-level module or script, so that
``import pkg.models.trial`` works from ``code/``. Left out: what the directory's ``.detignore``
names (as Determined honours it, see ``_detignore``), hidden entries, caches, virtual
environments, files over 1 MiB (with one warning), and run output wherever it lies: this run's
checkpoint and log directories, any other checkpoint directory (``metadata.json`` beside
``state_dict.pth`` or ``load_data.json``: earlier runs, other trials, their own ``code/``),
any TensorBoard run (a directory holding ``events.out.tfevents.*`` files), any experiment's
folder (``experiment.json``, its search journal and locks); folders left empty are removed.
"""

import logging
import pathlib
import shutil
import sys
from typing import Callable, Iterable, List, Set, Tuple

from det_lightning.pytorch._detignore import DetIgnore

logger = logging.getLogger("det_lightning.pytorch")

MAX_CODE_FILE_BYTES = 1 << 20
_warned_large: Set[str] = set()


def main_module_name() -> str:
    """The importable name of the ``__main__`` script (``pkg.mod`` under ``python -m``)."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)
    main_file = getattr(main, "__file__", None)
    return pathlib.Path(main_file).stem if main_file else ""


def code_sources(trial_cls: type) -> List[Tuple[pathlib.Path, str]]:
    """What ``code/`` holds, as (source, path under ``code/``) pairs: the top-level package of
    the trial's module, or the directory of a top-level module or script (Determined copies
    the working directory). An installed single-file module copies only that file."""
    module = sys.modules.get(trial_cls.__module__)
    module_file = getattr(module, "__file__", None)
    if not module_file:
        return []
    path = pathlib.Path(module_file).resolve()
    name = trial_cls.__module__
    if name == "__main__":
        name = main_module_name() or path.stem
    parts = name.split(".")
    if path.name == "__init__.py":
        path = path.parent
    top = path.parents[len(parts) - 2] if len(parts) > 1 else path
    if len(parts) > 1 or path.is_dir():
        return [(top, top.name)]
    if path.parent.name in ("site-packages", "dist-packages") or path.parent in _install_dirs():
        # A module of the Python installation itself (a class whose __module__ is `abc`, say):
        # never copy the whole standard library or site-packages, only the file.
        return [(path, path.name)]
    return [(path.parent, "")]


def _install_dirs() -> Set[pathlib.Path]:
    """The interpreter's own library directories (standard library, site-packages)."""
    import site
    import sysconfig

    dirs = {
        pathlib.Path(p).resolve()
        for key, p in sysconfig.get_paths().items()
        if key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    dirs.update(pathlib.Path(p).resolve() for p in site.getsitepackages())
    return dirs


def copy_code(
    sources: List[Tuple[pathlib.Path, str]], dest: pathlib.Path, skip: Iterable[pathlib.Path]
) -> None:
    """Copies ``sources`` under ``dest``, never descending into ``skip`` (the checkpoint and log
    directories), hidden entries, caches, virtual environments or files over 1 MiB."""
    dest.mkdir(parents=True, exist_ok=True)
    skip_resolved = {p.resolve() for p in skip}
    large: List[str] = []

    def ignorer(root: pathlib.Path) -> Callable[[str, List[str]], List[str]]:
        detignore = DetIgnore.for_directory(root)

        def ignore(directory: str, names: List[str]) -> List[str]:
            ignored = []
            for name in names:
                full = pathlib.Path(directory, name)
                relative = full.relative_to(root).as_posix()
                if (
                    _skip_entry(full, skip_resolved)
                    or _is_run_output(full)
                    or detignore.ignored(relative, full.is_dir())
                ):
                    ignored.append(name)
                elif full.is_file() and full.stat().st_size > MAX_CODE_FILE_BYTES:
                    large.append(str(full))
                    ignored.append(name)
            return ignored

        return ignore

    for source, relative in sources:
        target = dest / relative if relative else dest
        if source.is_dir():
            shutil.copytree(
                source, target, ignore=ignorer(source), dirs_exist_ok=True, symlinks=True
            )
        elif source.is_file():
            shutil.copy2(source, target)
    _remove_empty_folders(dest)
    _warn_large(large)


def _remove_empty_folders(dest: pathlib.Path) -> None:
    """Folders left with no file (``checkpoints/`` once its runs are left out, a TensorBoard
    root before its first event): no import needs them."""
    for folder in sorted(
        (p for p in dest.rglob("*") if p.is_dir() and not p.is_symlink()),
        key=lambda p: len(p.parts),
        reverse=True,
    ):
        if not any(folder.iterdir()):
            folder.rmdir()


def _skip_entry(path: pathlib.Path, skip: Set[pathlib.Path]) -> bool:
    name = path.name
    if name.startswith(".") or name in ("__pycache__", "venv", "node_modules"):
        return True
    if path.resolve() in skip:
        return True
    return path.is_dir() and (path / "pyvenv.cfg").exists()


def _is_run_output(path: pathlib.Path) -> bool:
    """A checkpoint directory, a TensorBoard run, or an experiment's folder (its
    ``experiment.json`` beside its search journal or trial folders), of this run or any
    other."""
    if not path.is_dir() or path.is_symlink():
        return False
    if (path / "metadata.json").is_file() and (
        (path / "state_dict.pth").exists() or (path / "load_data.json").exists()
    ):
        return True
    if (path / "experiment.json").is_file() and (
        (path / "search.journal").exists() or any(path.glob("trial-*"))
    ):
        return True
    return any(path.glob("events.out.tfevents.*"))


def _warn_large(large: List[str]) -> None:
    new = [p for p in large if p not in _warned_large]
    if not new:
        return
    _warned_large.update(new)
    logger.warning(
        f"Not copied into checkpoints' code/ (files over {MAX_CODE_FILE_BYTES >> 20} MiB): "
        f"{new[:5]}{' ...' if len(new) > 5 else ''}"
    )
