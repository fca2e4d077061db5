"""A Lightning ``CheckpointIO`` that writes Determined's checkpoint directory.

Saves go through ``lightning.Trainer.save_checkpoint``, so Lightning callbacks and the module see
``on_save_checkpoint`` as for any Lightning checkpoint. When the save carries a
:class:`DeterminedSave` as its ``storage_options``, this plugin hands Lightning's checkpoint dict
to it (``CheckpointManager`` writes the Determined directory atomically, in the background or
not: ``checkpoints.py``); any other save (a user's ``ModelCheckpoint``) is an ordinary ``.ckpt``
file.
"""

import pathlib
from typing import Any, Callable, Dict, Optional

from lightning.fabric.plugins import TorchCheckpointIO
from typing_extensions import override


class DeterminedSave:
    """A Determined checkpoint requested through ``Trainer.save_checkpoint``.

    Args:
        write: takes Lightning's checkpoint dict and writes the Determined directory (or
            starts writing it); returns the directory's final path.
    """

    def __init__(self, write: Callable[[Dict[str, Any]], pathlib.Path]) -> None:
        self.write = write
        self.path: Optional[pathlib.Path] = None  # set on the rank that writes


class DeterminedCheckpointIO(TorchCheckpointIO):
    """Writes Determined directories for ``DeterminedSave`` requests, ``.ckpt`` files otherwise."""

    @override
    def save_checkpoint(
        self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None
    ) -> None:
        if isinstance(storage_options, DeterminedSave):
            storage_options.path = storage_options.write(checkpoint)
            return
        super().save_checkpoint(checkpoint, path, storage_options)
