"""Downloads, here, the wheels a GPU machine without a package index needs for
``scripts/gpu-check.sh`` (run as ``scripts/gpu-check.sh --prepare``; see that script's header).

The wheels are those of the distributions that ``PROBE`` (det_lightning with its adapters, the
real Determined's ``determined.pytorch``, Lightning, pytest) loads in this checkout's ``.venv``,
at the versions installed here, for the GPU machine's Python (``--python-version``, default
3.12) on manylinux x86-64, each without its dependencies (``pip download --no-deps``): the
import tells what is needed, not the packages' metadata. So Determined comes without the
storage libraries it declares and ``determined.pytorch`` never imports (google-api-python-client,
boto3/botocore: 33 MiB). Left out too: torch and its CUDA libraries (the GPU machine's own CUDA
build is what the check runs on), det_lightning (``scripts/gpu_install.py`` builds it from the
checkout there) and, with ``--have FILE``, what the GPU machine already holds. Prints the total
size; a carried folder counts against the device tool's 64 MiB limit.
"""

import argparse
import importlib.metadata as md
import json
import pathlib
import re
import subprocess
import sys
from typing import Dict, List, Set

# Never carried: the GPU machine's own CUDA build of torch is what the check runs on.
NEVER = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64"]


def normalized(name: str) -> str:
    """
    >>> normalized("Typing_Extensions")
    'typing-extensions'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


# What the GPU check imports: what its tests and benchmark run on.
PROBE = "import det_lightning.adapters, determined.pytorch, lightning, pytest, xdist"
_FILES = "import sys, json; print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))"


def imported(statement: str = PROBE) -> Dict[str, str]:
    """{name: installed version} of the distributions whose files ``statement`` loads, run in a
    fresh process of this Python."""
    out = subprocess.run(
        [sys.executable, "-c", f"{statement}\n{_FILES}"], check=True, capture_output=True, text=True
    ).stdout
    loaded = {str(pathlib.Path(f).resolve()) for f in json.loads(out.splitlines()[-1]) if f}
    found: Dict[str, str] = {}
    for dist in md.distributions():
        for f in dist.files or []:
            if (
                f.suffix in (".py", ".so")
                and str(pathlib.Path(str(dist.locate_file(f))).resolve()) in loaded
            ):
                found[normalized(dist.metadata["Name"])] = dist.version
                break
    return found


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
    wanted = imported()
    wanted.pop("det-lightning", None)
    pins = [f"{n}=={v}" for n, v in sorted(wanted.items()) if not NEVER.match(n) and n not in have]
    args.dest.mkdir(parents=True, exist_ok=True)
    download(pins, args.dest, args.python_version)
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
