"""Listing a directory of checkpoints while retention deletes one of them (in another process:
a trial training beside a client that reads its experiment). Seen under load: the listing
raised FileNotFoundError for the checkpoint renamed away between the folder's listing and the
read of its files."""

import pathlib
import shutil
from typing import Any

import pytest

from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import write_files

U1 = "0b7c8a3e-1111-4222-8333-944445555661"
U2 = "0b7c8a3e-1111-4222-8333-944445555662"


def _checkpoint(directory: pathlib.Path, steps: int) -> None:
    directory.mkdir(parents=True)
    trial_state = {**ckpt.new_trial_state(), "batches_trained": steps}
    write_files(directory, {ckpt.MODELS: []}, trial_state, {"hparams": {}}, code=[], code_skip=[])


@pytest.mark.parametrize("listing", ["list_local", "damaged_local"])
def test_a_checkpoint_deleted_while_listed_is_left_out(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, listing: str
) -> None:
    _checkpoint(tmp_path / U1, 3)
    _checkpoint(tmp_path / U2, 5)
    real = ckpt.lacking_local

    def deleted_first(path: pathlib.Path) -> Any:
        if path.name == U1:  # retention renames it away just now
            shutil.rmtree(path)
        return real(path)

    monkeypatch.setattr(ckpt, "lacking_local", deleted_first)
    found = getattr(ckpt, listing)(tmp_path)
    if listing == "list_local":
        assert [entry.name for entry in found] == [U2]
    else:
        assert found == []  # nothing damaged: one whole, one gone
