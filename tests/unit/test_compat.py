"""Tests for det_lightning.compat, the opt-in ``determined`` -> ``det_lightning`` import alias.

The real ``determined`` may be installed next to det_lightning, and importing it (or aliasing
it) would leak into every later test, so each scenario runs in a fresh interpreter.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

# The interop extra (the real determined) is always installed where the suite runs; a missing
# install must fail loudly, not skip.
needs_real_determined = pytest.mark.interop


def _run(code: str, tmp_path: pathlib.Path) -> str:
    """Run ``code`` in a fresh interpreter with the repo importable; return its stdout."""
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=pythonpath)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def test_import_forms_resolve_to_det_lightning(tmp_path: pathlib.Path) -> None:
    out = _run(
        """
        from det_lightning import compat
        compat.install()

        import determined
        import determined as det
        from determined import pytorch, core
        import determined.pytorch.samplers
        from determined.pytorch import PyTorchTrial
        import det_lightning
        import det_lightning.pytorch
        import det_lightning.pytorch.samplers
        import det_lightning.core

        assert determined is det_lightning and det is det_lightning
        assert pytorch is det_lightning.pytorch and core is det_lightning.core
        assert determined.pytorch.samplers is det_lightning.pytorch.samplers
        assert PyTorchTrial is det_lightning.pytorch.PyTorchTrial
        assert det.pytorch.PyTorchTrial is det_lightning.pytorch.PyTorchTrial

        class MyTrial(det.pytorch.PyTorchTrial):
            pass

        assert issubclass(MyTrial, det_lightning.pytorch.PyTorchTrial)
        # The det_lightning modules keep their own names and specs.
        assert det_lightning.__spec__.name == "det_lightning"
        assert det_lightning.pytorch.samplers.__spec__.name == "det_lightning.pytorch.samplers"
        print("ok")
        """,
        tmp_path,
    )
    assert out.strip() == "ok"


def test_importing_det_lightning_does_not_install(tmp_path: pathlib.Path) -> None:
    out = _run(
        """
        import sys
        import det_lightning
        import det_lightning.pytorch
        import det_lightning.compat as compat

        assert not compat.is_installed()
        assert not any(type(f).__module__ == "det_lightning.compat" for f in sys.meta_path)
        assert not any(name.split(".")[0] == "determined" for name in sys.modules)
        print("ok")
        """,
        tmp_path,
    )
    assert out.strip() == "ok"


@needs_real_determined
def test_without_install_real_determined_is_imported(tmp_path: pathlib.Path) -> None:
    out = _run(
        """
        import det_lightning
        import det_lightning.compat
        import determined

        assert determined is not det_lightning
        assert determined.__name__ == "determined"
        print(determined.__file__)
        """,
        tmp_path,
    )
    assert "det_lightning" not in out
    assert out.strip().endswith(os.path.join("determined", "__init__.py"))


@needs_real_determined
def test_install_after_real_import_refuses(tmp_path: pathlib.Path) -> None:
    out = _run(
        """
        import determined
        from det_lightning import compat

        try:
            compat.install()
        except compat.RealDeterminedImportedError as exc:
            assert isinstance(exc, RuntimeError)
            assert not compat.is_installed()
            print(exc)
        else:
            raise AssertionError("install() accepted an already-imported real determined")
        """,
        tmp_path,
    )
    assert "already imported" in out
    assert "before" in out and "uninstall determined" in out and "separate process" in out


_MISSING_CASES = [
    ("import determined.nosuch", "determined.nosuch", "No module named"),
    ("from determined.nosuch import callbacks", "determined.nosuch", "No module named"),
    ("import determined.pytorch.nosuch", "determined.pytorch.nosuch", "No module named"),
    ("from determined.pytorch import NoSuchTrial", "determined.pytorch.NoSuchTrial", "cannot"),
]
# Modules Determined has and det_lightning refuses on purpose: the message says why.
_REFUSED_CASES = [
    ("import determined.keras", "determined.keras"),
    ("from determined import keras", "determined.keras"),
    ("from determined.keras import callbacks", "determined.keras"),
    ("import determined.pytorch.deepspeed", "determined.pytorch.deepspeed"),
    ("from determined.pytorch import deepspeed", "determined.pytorch.deepspeed"),
]


def _not_found(statements: list, tmp_path: pathlib.Path) -> list:
    """``[exc.name, str(exc)]`` of the ModuleNotFoundError each statement raises (None when it
    raises none), under the alias; one interpreter for the whole table (each child start
    imports torch and lightning)."""
    out = _run(
        f"""
        import json
        from det_lightning import compat
        compat.install()
        results = []
        for statement in {statements!r}:
            try:
                exec(statement)
            except ModuleNotFoundError as exc:
                results.append([exc.name, str(exc)])
            else:
                results.append(None)
        print(json.dumps(results))
        """,
        tmp_path,
    )
    return json.loads(out)


def test_missing_submodule_names_both_modules(tmp_path: pathlib.Path) -> None:
    got_all = _not_found([statement for statement, _, _ in _MISSING_CASES], tmp_path)
    for (statement, missing, lead), got in zip(_MISSING_CASES, got_all):
        assert got is not None, f"{statement!r} did not raise ModuleNotFoundError"
        name, message = got
        target = "det_lightning" + missing[len("determined") :]
        assert name == missing, statement
        assert message.startswith(lead), message
        assert missing in message and repr(target) in message, message
        assert "det_lightning runs PyTorchTrial code only" in message, message
        assert "has no equivalent" in message, message


def test_refused_submodule_says_why(tmp_path: pathlib.Path) -> None:
    from det_lightning import _refused

    got_all = _not_found([statement for statement, _ in _REFUSED_CASES], tmp_path)
    for (statement, missing), got in zip(_REFUSED_CASES, got_all):
        assert got is not None, f"{statement!r} did not raise ModuleNotFoundError"
        assert got[0] == missing, statement
        assert "not provided by det_lightning" in got[1], got
        assert _refused.REFUSED[missing] in got[1], got


def test_uninstall_restores(tmp_path: pathlib.Path) -> None:
    out = _run(
        """
        import importlib.util
        import sys
        from det_lightning import compat

        compat.install()
        compat.install()  # idempotent
        assert compat.is_installed()
        assert sum(type(f).__name__ == "_DeterminedAliasFinder" for f in sys.meta_path) == 1
        import determined.pytorch.samplers
        import det_lightning
        assert determined is det_lightning

        compat.uninstall()
        assert not compat.is_installed()
        assert not any(name.split(".")[0] == "determined" for name in sys.modules)
        compat.uninstall()  # a second call is harmless

        if importlib.util.find_spec("determined") is None:
            print("no real determined")
        else:
            import determined
            assert determined is not det_lightning
            print(determined.__name__, "det_lightning" in determined.__file__)
        """,
        tmp_path,
    )
    assert out.strip() == "determined False"


def test_aliased_context_manager(tmp_path: pathlib.Path) -> None:
    out = _run(
        """
        import sys
        import det_lightning
        from det_lightning import compat

        with compat.aliased():
            import determined
            assert determined is det_lightning
            assert compat.is_installed()
        assert not compat.is_installed()
        assert "determined" not in sys.modules

        compat.install()
        with compat.aliased():
            pass
        assert compat.is_installed(), "aliased() must not remove an alias it did not add"
        print("ok")
        """,
        tmp_path,
    )
    assert out.strip() == "ok"


def test_invalid_hp_is_a_top_level_name_with_determined_s_message_check() -> None:
    import det_lightning as det

    error = det.InvalidHP("lr too large")
    assert error.msg == "lr too large" and isinstance(error, Exception)
    with pytest.raises(TypeError, match="message string"):
        det.InvalidHP(3)  # type: ignore[arg-type]
