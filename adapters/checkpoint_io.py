"""A Lightning ``CheckpointIO`` that writes Determined's checkpoint directory.

Saves go through ``lightning.Trainer.save_checkpoint``, so Lightning callbacks and the module see
``on_save_checkpoint`` as for any Lightning checkpoint. When the save carries a
:class:`DeterminedSave` as its ``storage_options``, this plugin writes the Determined directory
(atomically, see ``_checkpoint.write_atomically``); any other save (a user's ``ModelCheckpoint``)
is an ordinary ``.ckpt`` file.
"""

import logging
import pathlib
import pickle
from typing import Any, Callable, Dict, Optional

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from typing_extensions import override

from det_lightning.pytorch import _checkpoint as ckpt

logger = logging.getLogger("det_lightning.pytorch")


class DeterminedSave:
    """What a Determined checkpoint needs beyond Lightning's checkpoint dict.

    Args:
        root: the checkpoint directory (parent of the UUID directories).
        uuid: this checkpoint's name.
        build_files: writes the Determined files into the directory it is given.
    """

    def __init__(
        self, root: pathlib.Path, uuid: str, build_files: Callable[[pathlib.Path, Dict], None]
    ) -> None:
        self.root = root
        self.uuid = uuid
        self.build_files = build_files
        self.path: Optional[pathlib.Path] = None


class DeterminedCheckpointIO(TorchCheckpointIO):
    """Writes Determined directories for ``DeterminedSave`` requests, ``.ckpt`` files otherwise."""

    @override
    def save_checkpoint(
        self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None
    ) -> None:
        if isinstance(storage_options, DeterminedSave):
            request = storage_options
            request.path = ckpt.write_atomically(
                request.root, request.uuid, lambda tmp: request.build_files(tmp, checkpoint)
            )
            return
        super().save_checkpoint(checkpoint, path, storage_options)


def write_determined_files(
    directory: pathlib.Path,
    state_dict: Dict[str, Any],
    trial_state: Dict[str, int],
    load_data: Dict[str, Any],
    metadata: Dict[str, Any],
    code_source: Optional[pathlib.Path],
    code_skip: Any,
) -> None:
    """The files of one checkpoint, in ``directory``."""
    torch.save(state_dict, str(directory / ckpt.STATE_DICT_FILE))
    with open(directory / ckpt.TRIAL_STATE_FILE, "wb") as f:
        pickle.dump(dict(trial_state), f)
    ckpt.write_json(directory / ckpt.LOAD_DATA_FILE, load_data)
    ckpt.write_json(directory / ckpt.METADATA_FILE, metadata)
    ckpt.copy_code(code_source, directory / ckpt.CODE_DIR, code_skip)
