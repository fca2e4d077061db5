"""Writing a checkpoint directory (the layout is in ``_checkpoint``), safely.

A checkpoint is written into ``.<uuid>.partial`` beside its final place and renamed when
complete, so a crash never leaves a directory that looks whole::

    write_atomically(root, uuid, write)       = begin_atomically, then finish_atomically
      root/.<uuid>.partial/                 write(partial): write_files(...)
        state_dict.pth, lightning_state.pth, trial_state.pkl, load_data.json, metadata.json, code/
      fsync the files, rename to root/<uuid>, fsync root
    remove_partials(root)                   what a crash left behind, before a resume

Deleting is the mirror image: the directory leaves its name in one rename, then its files go::

    delete_atomically(root, uuid)
      rename root/<uuid> to root/.<uuid>.deleting, fsync root, remove it
    remove_deletions(root)                  what a killed deletion left, when a run starts

Retention marks a checkpoint it gives up (``mark_unkept``: an empty ``.<uuid>.unkept`` beside
it) before deleting it, and removes the mark once the checkpoint is gone from its name; a
deletion that failed (the rename refused) leaves the checkpoint whole and marked, and the next
run in the directory deletes it (``_remote.sweep``).
"""

import dataclasses
import json
import logging
import os
import pathlib
import pickle
import shutil
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from det_lightning.pytorch._checkpoint import (
    CODE_DIR,
    DELETING_SUFFIX,
    DETERMINED_VERSION,
    LIGHTNING_CALLBACKS_FILE,
    LOAD_DATA_FILE,
    METADATA_FILE,
    PARTIAL_SUFFIX,
    STATE_DICT_FILE,
    TRIAL_STATE_FILE,
    UNKEPT_SUFFIX,
)
from det_lightning.pytorch._code import copy_code, main_module_name

logger = logging.getLogger("det_lightning.pytorch")


# ----- load_data.json and metadata.json -------------------------------------------------------
def trial_class_spec(trial_cls: type) -> Tuple[str, bool]:
    """``module:QualName`` for the trial class, and whether it lives in the ``__main__`` script.

    For a class in ``__main__`` the module is the script's importable name (``pkg.mod`` under
    ``python -m pkg.mod``, else the file's stem), as Determined guesses it.
    """
    module = trial_cls.__module__
    if module != "__main__":
        return f"{module}:{trial_cls.__qualname__}", False
    return f"{main_module_name()}:{trial_cls.__qualname__}", True


def make_load_data(
    trial_cls: type, hparams: Optional[Dict[str, Any]], exp_conf: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    """The content of ``load_data.json`` for a trial of class ``trial_cls``."""
    spec, in_main = trial_class_spec(trial_cls)
    load_data: Dict[str, Any] = {
        "trial_type": "PyTorchTrial",
        "experiment_config": exp_conf,
        "hparams": hparams,
        "trial_cls_spec": spec,
        "is_trainer": True,
    }
    if in_main:
        load_data["trial_in_main"] = True
    return load_data


def make_metadata(steps_completed: int) -> Dict[str, Any]:
    """The content of ``metadata.json``: Determined's keys plus our version."""
    from det_lightning import __version__

    return {
        "determined_version": DETERMINED_VERSION,
        "det_lightning_version": __version__,
        "steps_completed": int(steps_completed),
        "framework": f"torch-{torch.__version__}",
        "format": "pickle",
    }


def write_json(path: pathlib.Path, content: Any) -> None:
    """Writes ``content`` as JSON, turning numpy and torch scalars into numbers."""
    path.write_text(json.dumps(content, default=_json_default, indent=2))


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic,)):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


# ----- writing --------------------------------------------------------------------------------
def write_files(
    directory: pathlib.Path,
    state_dict: Dict[str, Any],
    trial_state: Dict[str, int],
    load_data: Dict[str, Any],
    code: List[Tuple[pathlib.Path, str]],
    code_skip: List[pathlib.Path],
    lightning_callbacks: Optional[Dict[str, Any]] = None,
    metadata: Optional[Dict[str, Any]] = None,
) -> None:
    """The files of one checkpoint, in ``directory``.

    Args:
        directory: an empty directory (the partial one ``write_atomically`` renames).
        state_dict: the content of ``state_dict.pth``.
        trial_state: the content of ``trial_state.pkl``; its ``batches_trained`` is
            ``metadata.json``'s ``steps_completed``.
        load_data: the content of ``load_data.json``.
        code: what ``code/`` holds (see ``_code.code_sources``).
        code_skip: directories never copied into ``code/``.
        lightning_callbacks: Lightning callbacks' state, by ``state_key``.
        metadata: more keys for ``metadata.json`` (the searcher metric, the trial's run).
    """
    torch.save(state_dict, str(directory / STATE_DICT_FILE))
    if lightning_callbacks:
        torch.save({"callbacks": lightning_callbacks}, str(directory / LIGHTNING_CALLBACKS_FILE))
    with open(directory / TRIAL_STATE_FILE, "wb") as f:
        pickle.dump({k: int(v) for k, v in trial_state.items()}, f)
    write_json(directory / LOAD_DATA_FILE, load_data)
    write_json(
        directory / METADATA_FILE,
        {**make_metadata(trial_state["batches_trained"]), **(metadata or {})},
    )
    copy_code(code, directory / CODE_DIR, code_skip)


@dataclasses.dataclass(frozen=True)
class CheckpointFiles:
    """Everything one checkpoint's files hold (``write_files``' arguments), taken in the
    training thread; ``write`` may run in another one."""

    state_dict: Dict[str, Any]
    trial_state: Dict[str, int]
    load_data: Dict[str, Any]
    code: List[Tuple[pathlib.Path, str]]
    code_skip: List[pathlib.Path]
    lightning_callbacks: Optional[Dict[str, Any]] = None
    metadata: Optional[Dict[str, Any]] = None

    def write(self, directory: pathlib.Path) -> None:
        """Writes the files into ``directory`` (see ``write_files``)."""
        write_files(
            directory,
            self.state_dict,
            self.trial_state,
            self.load_data,
            self.code,
            self.code_skip,
            self.lightning_callbacks,
            self.metadata,
        )


# ----- atomic writing -------------------------------------------------------------------------
def write_atomically(
    root: pathlib.Path, uuid: str, write: Callable[[pathlib.Path], None]
) -> pathlib.Path:
    """Calls ``write(tmp_dir)`` and renames the finished directory to ``root/uuid``.

    Raises:
        FileExistsError: ``root/uuid`` exists already (it is left alone).
    """
    return finish_atomically(root, uuid, begin_atomically(root, uuid), write)


def begin_atomically(root: pathlib.Path, uuid: str) -> pathlib.Path:
    """Makes the hidden directory ``root/.<uuid>.partial`` a checkpoint is written into.

    Raises:
        FileExistsError: ``root/uuid`` (or its partial directory) exists already.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / uuid
    partial = root / f".{uuid}{PARTIAL_SUFFIX}"
    if final.exists() or partial.exists():
        raise FileExistsError(f"Checkpoint {final} already exists; not overwriting it.")
    partial.mkdir()
    return partial


def finish_atomically(
    root: pathlib.Path,
    uuid: str,
    partial: pathlib.Path,
    write: Callable[[pathlib.Path], None],
    before_rename: Optional[Callable[[], None]] = None,
) -> pathlib.Path:
    """Calls ``write(partial)``, fsyncs its files, calls ``before_rename()`` (an exception it
    raises forbids the checkpoint), renames it to ``root/uuid`` and fsyncs ``root``; on any
    failure ``partial`` is removed and nothing appears under ``uuid``."""
    try:
        write(partial)
        _fsync_tree(partial)
        if before_rename is not None:
            before_rename()
        os.replace(partial, root / uuid)
    except BaseException:
        abandon_partial(partial)
        raise
    _fsync_dir(root)
    return root / uuid


def abandon_partial(partial: pathlib.Path) -> None:
    """Removes a partial directory whose write failed or never started."""
    shutil.rmtree(partial, ignore_errors=True)


def _fsync_tree(path: pathlib.Path) -> None:
    for entry in path.iterdir():
        if entry.is_file() and entry.suffix in (".pth", ".pkl", ".json"):
            with open(entry, "rb") as f:
                os.fsync(f.fileno())


def _fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def remove_partials(root: pathlib.Path) -> List[pathlib.Path]:
    """Deletes unfinished checkpoint directories a crash left behind; returns them."""
    return _remove_hidden(root, PARTIAL_SUFFIX)


def remove_deletions(root: pathlib.Path) -> List[pathlib.Path]:
    """Finishes deletions a killed process left (``.<uuid>.deleting``); returns them.

    Always safe, also while another process uses ``root``: such a directory never becomes a
    checkpoint again, and two processes removing it at once both succeed.
    """
    return _remove_hidden(root, DELETING_SUFFIX)


def _remove_hidden(root: pathlib.Path, suffix: str) -> List[pathlib.Path]:
    removed = []
    if root.is_dir():
        for entry in root.iterdir():
            if entry.name.startswith(".") and entry.name.endswith(suffix):
                if _remove_tree(entry):
                    removed.append(entry)
    return removed


def delete_atomically(root: pathlib.Path, uuid: str) -> bool:
    """Deletes the checkpoint ``root/uuid``: one rename takes it from its name (``latest``,
    ``load_trial_from_checkpoint_path`` and a sync script never see it half deleted), then its
    files are removed. A failure is logged with its cause, never raised: losing a checkpoint
    that retention gave up must not stop training. Returns whether it is gone from its name.
    """
    final = root / uuid
    hidden = root / f".{uuid}{DELETING_SUFFIX}"
    try:
        os.replace(final, hidden)
    except OSError as e:
        logger.warning(f"Could not delete checkpoint {final}: {e}")
        return False
    _fsync_dir(root)
    _remove_tree(hidden)
    return True


def mark_unkept(root: pathlib.Path, uuid: str) -> None:
    """Marks ``root/uuid`` as given up by retention, before it is deleted. A mark that cannot
    be written is logged: the deletion is tried all the same, only a failed one is then not
    finished by the next run."""
    try:
        _unkept_mark(root, uuid).touch()
    except OSError as e:
        logger.warning(f"Could not mark checkpoint {root / uuid} for deletion: {e}")


def unmark_unkept(root: pathlib.Path, uuid: str) -> None:
    """Removes the mark of ``root/uuid`` once it is gone from its name (a mark left behind is
    removed by the next run, which finds no checkpoint of that name)."""
    try:
        _unkept_mark(root, uuid).unlink(missing_ok=True)
    except OSError as e:
        logger.warning(f"Could not remove {_unkept_mark(root, uuid)}: {e}")


def marked_unkept(root: pathlib.Path) -> List[str]:
    """The names retention marked for deletion in ``root`` (``mark_unkept``), sorted."""
    if not root.is_dir():
        return []
    return sorted(
        entry.name[1 : -len(UNKEPT_SUFFIX)]
        for entry in root.iterdir()
        if entry.name.startswith(".") and entry.name.endswith(UNKEPT_SUFFIX)
    )


def _unkept_mark(root: pathlib.Path, uuid: str) -> pathlib.Path:
    return root / f".{uuid}{UNKEPT_SUFFIX}"


def _remove_tree(path: pathlib.Path) -> bool:
    """Removes ``path``; a failure (other than it being gone already) is logged."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass  # another process finished it
    except OSError as e:
        logger.warning(
            f"Could not remove {path} ({e}); it is hidden and no checkpoint, and the next run "
            f"in {path.parent} removes it again."
        )
        return False
    return True
