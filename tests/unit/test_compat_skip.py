"""Without the real Determined the parity tests skip with the reason, or fail when required."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Makes `determined` unimportable in the child, as in an environment without the extra.
HIDE = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "determined" or name.startswith("determined."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, _Hide())
"""


def _pytest(tmp_path: pathlib.Path, require: bool) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(HIDE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("DET_LIGHTNING_REQUIRE_INTEROP", None)
    if require:
        env["DET_LIGHTNING_REQUIRE_INTEROP"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:xdist",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            str(ROOT / "tests/compat/test_parity.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_without_determined_the_parity_tests_skip_naming_the_install(
    tmp_path: pathlib.Path,
) -> None:
    result = _pytest(tmp_path, require=False)
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: nothing else to run
    assert "skipped" in result.stdout and "pip install -e '.[interop]'" in result.stdout, (
        result.stdout
    )
    assert "passed" not in result.stdout and "error" not in result.stdout.lower(), result.stdout


def test_when_required_a_missing_determined_is_an_error(tmp_path: pathlib.Path) -> None:
    result = _pytest(tmp_path, require=True)
    assert result.returncode != 0, result.stdout
    assert "DET_LIGHTNING_REQUIRE_INTEROP=1 forbids skipping" in result.stdout + result.stderr
