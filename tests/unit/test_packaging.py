"""What ships, and what ``import det_lightning`` costs."""

import hashlib
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_ships_adapters_inside_the_package(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    wheel = next(tmp_path.glob("det_lightning-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "det_lightning/adapters/__init__.py" in names
    assert "det_lightning/adapters/module.py" in names
    assert "det_lightning/adapters/lightning/versions.py" in names  # Lightning's internals
    assert "det_lightning/pytorch/_trainer.py" in names
    assert not any(n.startswith("adapters/") for n in names), "a top-level `adapters` would clash"
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/", "docs/")) for n in names)
    assert "det_lightning/py.typed" in names  # PEP 561: users' type checkers read our annotations
    # Every package of the source tree ships (pyproject.toml lists them one by one).
    for init in (REPO / "det_lightning").rglob("__init__.py"):
        assert str(init.relative_to(REPO)) in names, init
    for init in (REPO / "adapters").rglob("__init__.py"):
        assert "det_lightning/" + str(init.relative_to(REPO)) in names, init
    # One version: det_lightning.__version__ names the wheel and its metadata.
    import det_lightning

    assert wheel.name.startswith(f"det_lightning-{det_lightning.__version__}-")
    metadata = (
        zipfile.ZipFile(wheel)
        .read(f"det_lightning-{det_lightning.__version__}.dist-info/METADATA")
        .decode()
    )
    assert "Provides-Extra: determined-deps" in metadata
    assert 'Requires-Dist: ruamel.yaml; extra == "determined-deps"' in metadata
    assert 'Requires-Dist: requests; extra == "determined-deps"' in metadata


def _repo_copy_for_run_example(tmp_path: pathlib.Path) -> pathlib.Path:
    """The files scripts/run-example.sh reads, with .venv/bin/python running this Python."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "run-example.sh", tmp_path / "scripts")
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copytree(REPO / "examples" / "mnist", tmp_path / "examples" / "mnist")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return tmp_path


@pytest.mark.slow
def test_run_example_installs_once_and_says_what_it_does(tmp_path: pathlib.Path) -> None:
    repo = _repo_copy_for_run_example(tmp_path)
    stamp = repo / ".venv" / ".det_lightning-setup"
    stamp.write_text(hashlib.sha256(b"another pyproject").hexdigest() + "  pyproject.toml\n")
    script = ["bash", str(repo / "scripts" / "run-example.sh"), "--help"]
    stale = subprocess.run(script, capture_output=True, text=True, timeout=300)
    # pyproject.toml changed since the install: it installs (here: no setup.sh to run).
    assert stale.stdout.startswith("run-example: installing det_lightning into .venv")
    assert stale.returncode != 0
    digest = hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest()
    stamp.write_text(f"{digest}  pyproject.toml\n")  # what scripts/setup.sh writes
    current = subprocess.run(script, capture_output=True, text=True, timeout=300)
    assert current.returncode == 0, current.stderr
    lines = current.stdout.splitlines()
    assert (
        lines[0] == "run-example: det_lightning is installed in .venv (delete .venv to reinstall)"
    )
    assert lines[1].startswith("run-example: training examples/mnist")
    assert "usage: train.py" in current.stdout


def test_setup_writes_the_stamp_run_example_checks() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert 'sha256sum pyproject.toml >"$venv/.det_lightning-setup"' in setup
    assert "stamp=.venv/.det_lightning-setup" in (REPO / "scripts" / "run-example.sh").read_text()


def test_import_does_not_load_lightning() -> None:
    code = (
        "import sys, det_lightning, det_lightning.pytorch, det_lightning.core; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('lightning', 'pytorch_lightning', 'adapters')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_module_of_the_public_api_imports_lightning_at_top_level() -> None:
    for path in (REPO / "det_lightning").rglob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith(("import lightning", "from lightning")):
                pytest.fail(f"{path.relative_to(REPO)} imports lightning at module level: {line}")


def test_code_imports_the_bridge_by_its_installed_name() -> None:
    for path in [*(REPO / "adapters").rglob("*.py"), *(REPO / "det_lightning").rglob("*.py")]:
        text = path.read_text()
        assert "from adapters" not in text and "import adapters" not in text, path


def _lightning_requirement() -> str:
    match = re.search(
        r'^\s*"(lightning[<>=!,.0-9]*)",', (REPO / "pyproject.toml").read_text(), re.M
    )
    assert match, "pyproject.toml lists no lightning dependency"
    return match.group(1)


@pytest.mark.parametrize("withdrawn", ["2.6.2", "2.6.3"])
def test_the_malicious_lightning_releases_are_never_allowed(withdrawn: str) -> None:
    from packaging.requirements import Requirement

    specifier = Requirement(_lightning_requirement()).specifier
    assert withdrawn not in specifier
    assert "2.6.6" in specifier and "2.4.0" in specifier  # the releases CI runs stay allowed


def test_every_lightning_spec_in_the_scripts_is_an_exact_allowed_release() -> None:
    from packaging.requirements import Requirement

    allowed = Requirement(_lightning_requirement()).specifier
    for path in [*(REPO / "scripts").glob("*.sh"), REPO / ".ci" / "run"]:
        for spec in re.findall(r"lightning==([0-9.]+)", path.read_text()):
            assert spec in allowed, f"{path.name} pins lightning=={spec}, which pyproject refuses"


def test_adapters_refuse_an_installed_withdrawn_release_before_importing_lightning() -> None:
    code = (
        "import sys, importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.6.3' if name == 'lightning' else real(name)\n"
        "try:\n"
        "    import det_lightning.adapters\n"
        "except ImportError as e:\n"
        "    print('refused', 'lightning' in sys.modules, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused False lightning 2.6.3 is a withdrawn"), out.stdout
    assert "!=2.6.2,!=2.6.3" in out.stdout


def test_ci_smokes_the_built_wheel_and_builds_the_docs_strictly() -> None:
    ci = (REPO / "scripts" / "test.sh").read_text()
    assert "bash scripts/wheel-smoke.sh" in ci
    assert "-m sphinx -W --keep-going -n" in ci
    smoke = (REPO / "scripts" / "wheel-smoke.sh").read_text()
    assert "-m build --no-isolation" in smoke  # sdist, then the wheel from it: offline
    assert "--no-index" in smoke  # the fresh venv installs nothing from an index
    assert "examples/mnist" in smoke and "__version__" in smoke
