"""A Lightning ``CheckpointIO`` that writes Determined's checkpoint directory.

Saves go through ``lightning.Trainer.save_checkpoint``, so Lightning callbacks and the module see
``on_save_checkpoint`` as for any Lightning checkpoint. When the save carries a
:class:`DeterminedSave` as its ``storage_options``, this plugin writes the Determined directory
(atomically, see ``_checkpoint_write.write_atomically``); any other save (a user's ``ModelCheckpoint``)
is an ordinary ``.ckpt`` file.
"""

import pathlib
from typing import Any, Callable, Dict, Optional

from lightning.fabric.plugins import TorchCheckpointIO
from typing_extensions import override

from det_lightning.pytorch._checkpoint_write import write_atomically


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
            request.path = write_atomically(
                request.root, request.uuid, lambda tmp: request.build_files(tmp, checkpoint)
            )
            return
        super().save_checkpoint(checkpoint, path, storage_options)

