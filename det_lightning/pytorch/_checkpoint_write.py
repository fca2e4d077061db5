"""Writing a checkpoint's files (the layout is in ``_checkpoint``).

``write_files`` (or ``CheckpointFiles.write``, with the content taken earlier) writes one
checkpoint's files into a directory: the partial directory that ``_local_store``'s
``begin_atomically``/``finish_atomically`` rename into place when complete, so a crash never
leaves a directory that looks whole::

    state_dict.pth, lightning_state.pth, trial_state.pkl, load_data.json, metadata.json, code/
"""

import dataclasses
import json
import pathlib
import pickle
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from det_lightning.pytorch._checkpoint import (
    CODE_DIR,
    DETERMINED_VERSION,
    LIGHTNING_CALLBACKS_FILE,
    LOAD_DATA_FILE,
    METADATA_FILE,
    STATE_DICT_FILE,
    TRIAL_STATE_FILE,
    WRITER_KEY,
)
from det_lightning.pytorch._code import copy_code, main_module_name


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
        WRITER_KEY: __version__,
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
    *,
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
            code=self.code,
            code_skip=self.code_skip,
            lightning_callbacks=self.lightning_callbacks,
            metadata=self.metadata,
        )
