"""What a killed client call leaves (``Checkpoint.download(path)``'s hidden copy, and
``add_metadata``'s temporary ``metadata.json``) is removed by the next such call in the same
folder; a live process's, and another machine's, stay."""

import json
import os
import pathlib
import socket
import subprocess

from det_lightning.experimental import _checkpoint

HEX = "0" * 32


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _plant(folder: pathlib.Path, prefix: str, suffix: str) -> dict:
    host = socket.gethostname()
    names = {
        "dead": f"{prefix}.{host}.{_dead_pid()}.{HEX}{suffix}",
        "live": f"{prefix}.{host}.{os.getppid()}.{HEX}{suffix}",
        "other machine": f"{prefix}.elsewhere.example.{_dead_pid()}.{HEX}{suffix}",
        "not ours": f"{prefix}.notes{suffix}",
    }
    for name in names.values():
        (folder / name).mkdir(parents=True) if suffix else (folder / name).write_text("{")
    return names


def test_a_killed_downloads_copy_is_removed_by_the_next(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "source"
    (source / "code").mkdir(parents=True)
    (source / "metadata.json").write_text(json.dumps({"steps_completed": 1}))
    (source / "code" / "train.py").write_text("x = 1")
    target = tmp_path / "out" / "best"
    target.parent.mkdir()
    names = _plant(target.parent, ".best", ".partial")
    _checkpoint._copy_checkpoint(source, target)
    left = sorted(p.name for p in target.parent.iterdir())
    assert names["dead"] not in left
    assert sorted([names["live"], names["other machine"], names["not ours"], "best"]) == left
    assert (target / "code" / "train.py").read_text() == "x = 1"


def test_a_killed_metadata_rewrite_is_removed_by_the_next(tmp_path: pathlib.Path) -> None:
    names = _plant(tmp_path, ".metadata.json", "")
    removed = _checkpoint.sweep_temporaries(tmp_path, ".metadata.json")
    assert [p.name for p in removed] == [names["dead"]]
    assert names["live"] in {p.name for p in tmp_path.iterdir()}


def test_a_temporary_name_says_whose_it_is() -> None:
    name = _checkpoint.temporary_name(".best")
    assert name.startswith(f".best.{socket.gethostname()}.{os.getpid()}.")
    assert not _checkpoint.sweep_temporaries(pathlib.Path("/nonexistent"), ".best")
