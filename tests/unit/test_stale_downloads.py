"""Download folders a killed process left in a bucket's cache: the next download (or sweep) on
the same machine removes them; another machine's and a live process's stay."""

import os
import pathlib
import socket
import subprocess
import sys

from det_lightning.pytorch._remote import DOWNLOADING, _download_folder, remove_stale_downloads

UUID = "0b2f6a3e-6d1e-4a43-9d1c-2f6f0b9e1a11"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_a_dead_process_of_this_machine_loses_its_download(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    host, dead = socket.gethostname(), _dead_pid()
    folders = {
        "stale": f".{UUID}.{host}.{dead}.abc123{DOWNLOADING}",
        "live": f".{UUID}.{host}.{os.getpid()}.def456{DOWNLOADING}",
        "elsewhere": f".{UUID}.other-machine.{dead}.ghi789{DOWNLOADING}",
        "unnamed": f".{UUID}.jkl012{DOWNLOADING}",  # before folders were named
        "checkpoint": UUID,
    }
    for name in folders.values():
        (cache / name).mkdir()
        (cache / name / "state_dict.pth").write_bytes(b"x" * 1024)
    removed = remove_stale_downloads(cache)
    assert removed == [cache / folders["stale"]]
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        v for k, v in folders.items() if k != "stale"
    )


def test_a_new_download_folder_is_named_for_this_process_and_sweeps_first(
    tmp_path: pathlib.Path,
) -> None:
    stale = tmp_path / f".{UUID}.{socket.gethostname()}.{_dead_pid()}.abc123{DOWNLOADING}"
    stale.mkdir()
    folder = _download_folder(tmp_path, UUID)
    assert not stale.exists()
    assert folder.name.startswith(f".{UUID}.{socket.gethostname()}.{os.getpid()}.")
    assert folder.name.endswith(DOWNLOADING) and folder.is_dir()
    assert remove_stale_downloads(tmp_path) == []  # this process is alive: its folder stays
