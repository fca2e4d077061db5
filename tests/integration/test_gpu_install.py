"""``scripts/gpu_install.py``, the install step of ``scripts/gpu-check.sh``, against a fake GPU
machine: a venv that sees this checkout's packages except those the GPU image lacks (the real
Determined, appdirs, ruamel.yaml, det_lightning), as the machine's ``python3`` sees its own.

The carried wheels are made here from the installed distributions (what ``--prepare``
downloads, without an index); one of them is Lightning, which the machine holds: it must not be
laid over the machine's copy. No GPU is needed: the step installs and proves the imports only.
"""

import base64
import hashlib
import importlib.metadata as md
import pathlib
import re
import subprocess
import sys
import sysconfig
import zipfile
from typing import Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LACKS = {"determined", "appdirs", "ruamel-yaml", "ruamel-yaml-clib", "det-lightning"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _fake_machine(where: pathlib.Path) -> pathlib.Path:
    """A venv whose site-packages links every entry of this one's but those of ``LACKS``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    target = pathlib.Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = pathlib.Path(sysconfig.get_paths()["purelib"])
    left_out: Set[str] = set()
    for dist in md.distributions(path=[str(ours)]):
        if _norm(dist.metadata["Name"]) in LACKS:
            left_out |= {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}
    for entry in ours.iterdir():
        if entry.name in left_out or "det_lightning" in entry.name:
            continue  # (det_lightning's editable finder and .pth too)
        (target / entry.name).symlink_to(entry)
    return python


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _wheel_of(name: str, dest: pathlib.Path) -> pathlib.Path:
    """A pure wheel of the installed distribution ``name``, from its recorded files."""
    dist = md.distribution(name)
    wheel = dest / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-py3-none-any.whl"
    info = next(f.parts[0] for f in dist.files or [] if f.parts[0].endswith(".dist-info"))
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    lines = []
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in dist.files or []:
            if ".." in f.parts or "__pycache__" in f.parts or f.parts[-1] in skip:
                continue
            data = pathlib.Path(str(dist.locate_file(f))).read_bytes()
            zf.writestr(str(f), data)
            lines.append(_record_line(str(f), data))
        zf.writestr(f"{info}/RECORD", "\n".join([*lines, f"{info}/RECORD,,"]) + "\n")
    return wheel


@pytest.mark.slow
def test_only_what_the_machine_lacks_is_installed_and_the_imports_work(
    tmp_path: pathlib.Path,
) -> None:
    python = _fake_machine(tmp_path / "machine")
    probe = [str(python), "-c", "import determined.pytorch"]
    assert subprocess.run(probe, capture_output=True).returncode != 0  # it lacks Determined
    install = [str(python), str(ROOT / "scripts" / "gpu_install.py"), str(tmp_path / "site")]

    without = subprocess.run(
        [*install, "--wheels", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert without.returncode == 3, without.stdout + without.stderr
    assert "determined" in without.stderr and "--prepare" in without.stderr

    wheels = tmp_path / "whl"
    wheels.mkdir()
    for name in ("determined", "appdirs", "ruamel.yaml", "lightning"):
        _wheel_of(name, wheels)
    done = subprocess.run([*install, "--wheels", str(wheels)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "import det_lightning.adapters, determined.pytorch, lightning: ok" in done.stdout
    assert "profiler labels left out where read" in done.stdout  # asked in the same process
    added = {_norm(d.metadata["Name"]) for d in md.distributions(path=[str(tmp_path / "site")])}
    assert added == {"determined", "appdirs", "ruamel-yaml"}  # not lightning: the machine's
    assert "det-lightning (editable)" in done.stdout or "det-lightning (editable)" in (
        without.stdout
    )
