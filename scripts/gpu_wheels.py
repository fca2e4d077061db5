"""Downloads, here, the wheels a GPU machine without a package index needs for
``scripts/gpu-check.sh`` (run as ``scripts/gpu-check.sh --prepare``; see that script's header).

The wheels are those of det_lightning's dependencies with the ``testing`` and ``interop`` extras
(the real Determined), at the versions installed in this checkout's ``.venv``, for the GPU
machine's Python (``--python-version``, default 3.12) on manylinux x86-64. Left out: torch and
its CUDA libraries (the GPU machine must already have a CUDA build of torch: its wheel alone is
several hundred MB) and, with ``--have FILE``, the packages the GPU machine already holds, except
small pure-Python ones (under 1 MiB: carried anyway, in case the machine's version does not
satisfy a pin, e.g. Determined's ``requests``). Prints the total size; a carried folder counts
against the device tool's 64 MiB limit.
"""

import argparse
import importlib.metadata as md
import pathlib
import re
import subprocess
import sys
from typing import Dict, List, Set

from packaging.requirements import Requirement

# Never carried: the GPU machine's own CUDA build of torch is what the check runs on.
NEVER = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64"]
SMALL = 2**20


def normalized(name: str) -> str:
    """
    >>> normalized("Typing_Extensions")
    'typing-extensions'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str, extras: Set[str], python: str) -> Dict[str, str]:
    """{name: installed version} of ``root`` and everything it requires (with ``extras``),
    markers evaluated for Python ``python`` on Linux."""
    env = {"python_version": python, "python_full_version": python + ".0"}
    found: Dict[str, Set[str]] = {}
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        dist = md.distribution(name)
        key = normalized(dist.metadata["Name"])
        if key in found and wanted <= found[key]:
            continue
        found[key] = found.get(key, set()) | wanted
        for line in dist.requires or []:
            req = Requirement(line)
            chosen = [{**env, "extra": e} for e in (wanted or {""})]
            if req.marker is None or any(req.marker.evaluate(e) for e in chosen):
                todo.append((req.name, set(req.extras)))
    return {name: md.version(name) for name in found}


def names_in(path: pathlib.Path) -> Set[str]:
    """Package names in ``path``: its ``Packages: a, b, ...`` line if it has one (the device
    tool's KINDS.md), else every comma- or whitespace-separated word."""
    text = path.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("Packages: ")]
    words = re.split(r"[,\s]+", lines[0][len("Packages: ") :] if lines else text)
    return {normalized(w.strip().rstrip(".")) for w in words if w.strip()}


def download(reqs: List[str], dest: pathlib.Path, python: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run([*cmd, *reqs], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=pathlib.Path)
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--have", type=pathlib.Path, help="names the GPU machine already holds")
    args = parser.parse_args()
    have = names_in(args.have) if args.have else set()
    wanted = closure("det-lightning", {"testing", "interop"}, args.python_version)
    wanted.pop("det-lightning")
    pins = [f"{n}=={v}" for n, v in sorted(wanted.items()) if not NEVER.match(n)]
    args.dest.mkdir(parents=True, exist_ok=True)
    download(pins, args.dest, args.python_version)
    for wheel in sorted(args.dest.glob("*.whl")):
        name = normalized(wheel.name.split("-")[0])
        pure = wheel.name.endswith("-none-any.whl")
        if name in have and not (pure and wheel.stat().st_size < SMALL):
            wheel.unlink()
    kept = list(args.dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in kept) / 2**20
    print(f"{len(kept)} wheels, {total:.1f} MiB in {args.dest}")
    if total > 56:
        print(
            "scripts/gpu_wheels.py: over 56 MiB; the device tool carries 64 MiB with the "
            "working tree: pass --have with the names the GPU machine already holds",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
