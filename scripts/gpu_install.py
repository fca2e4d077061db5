"""On the GPU machine, with ITS python3: make ``import det_lightning.adapters, determined.pytorch,
lightning`` work by adding only what that Python lacks (run by ``scripts/gpu-check.sh``).

    python3 scripts/gpu_install.py SITE [--wheels .whl]

Nothing is laid over the machine's packages: each carried wheel (``scripts/gpu_wheels.py``
chose them: the distributions those imports load that the machine's image lacks, Determined
without its storage libraries) is installed with ``--no-deps`` into the folder ``SITE`` only
when the machine's Python has no distribution of that name. The caller puts ``SITE`` on
``PYTHONPATH``. det_lightning itself is installed editable from this checkout (``--no-deps``),
as ``scripts/setup.sh`` does: the checkout's root is on ``sys.path`` wherever pytest or the
benchmark runs from it, and only the editable finder maps ``det_lightning.adapters`` to the
root ``adapters/`` folder there. Then the imports are proven in a fresh process run from the
checkout; exit status 0 when they work, 3 (with what failed) when not.
Nothing here needs a package index or a GPU.
"""

import argparse
import importlib.metadata as md
import os
import pathlib
import re
import subprocess
import sys
from typing import List

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROOF = "import det_lightning.adapters, determined.pytorch, lightning"
# Asked in the same process as the proof (on the GPU image each Python that imports torch and
# Lightning takes about 8 s to start): which of torch's functions the training loop follows
# without their profiler labels (a torch not read yet keeps them: its fingerprints go into
# adapters/profiler_labels.py's READ). A report that fails says so and fails nothing.
REPORT = """
try:
    from det_lightning.adapters import profiler_labels
    print(profiler_labels.report())
except Exception as e:
    print(f"profiler labels: no report ({type(e).__name__}: {e})")
"""


def normalized(name: str) -> str:
    """
    >>> normalized("ruamel.yaml"), normalized("Typing_Extensions")
    ('ruamel-yaml', 'typing-extensions')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: pathlib.Path) -> str:
    """The distribution a wheel file holds.

    >>> wheel_name(pathlib.Path("ruamel.yaml-0.18.10-py3-none-any.whl"))
    'ruamel-yaml'
    """
    return normalized(path.name.split("-")[0])


def missing_wheels(wheels: List[pathlib.Path], site: pathlib.Path) -> List[pathlib.Path]:
    """The wheels whose distribution neither this Python nor ``site`` already holds."""
    held = {normalized(d.metadata["Name"]) for d in md.distributions()}
    held |= {normalized(d.metadata["Name"]) for d in md.distributions(path=[str(site)])}
    return [w for w in wheels if wheel_name(w) not in held]


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    cmd += ["--no-index", "--no-deps", "--no-compile", "--no-cache-dir", *args]
    subprocess.run(cmd, check=True)


def install(site: pathlib.Path, wheel_dir: pathlib.Path) -> List[str]:
    """Installs into ``site`` what is missing; returns the distributions it installed."""
    site.mkdir(parents=True, exist_ok=True)
    added = missing_wheels(sorted(wheel_dir.glob("*.whl")), site) if wheel_dir.is_dir() else []
    if added:
        _pip("--target", str(site), *map(str, added))
    names = [wheel_name(w) for w in added]
    if "det-lightning" not in {normalized(d.metadata["Name"]) for d in md.distributions()}:
        _pip("--no-build-isolation", "--editable", str(ROOT))
        names.append("det-lightning (editable)")
    return names


def prove(site: pathlib.Path) -> subprocess.CompletedProcess:
    """``PROOF`` in a fresh process of this Python, with ``site`` on its path, then
    ``REPORT``."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    )
    return subprocess.run(
        [sys.executable, "-c", PROOF + "\n" + REPORT],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=pathlib.Path)
    parser.add_argument("--wheels", type=pathlib.Path, default=ROOT / ".whl")
    args = parser.parse_args()
    site = args.site.resolve()
    added = install(site, args.wheels)
    print(f"gpu_install: added {', '.join(added) or 'nothing'} in {site}", flush=True)
    proof = prove(site)
    if proof.returncode != 0:
        print(
            f"gpu_install: `{PROOF}` fails with {sys.executable}:\n{proof.stderr[-3000:]}"
            "Carry the missing wheels: bash scripts/gpu-check.sh --prepare (header of "
            "scripts/gpu-check.sh).",
            file=sys.stderr,
        )
        return 3
    print(f"gpu_install: {PROOF}: ok", flush=True)
    print(proof.stdout.rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
