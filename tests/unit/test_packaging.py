"""What ships, and what ``import det_lightning`` costs."""

import pathlib
import re
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
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)


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
