"""The comparisons with the real Determined 0.38.1 need it installed (the ``interop`` extra).

Without it this folder is skipped with the reason and the install command, unless
``DET_LIGHTNING_REQUIRE_INTEROP=1`` (set by ``scripts/test.sh``, so CI never skips them): then
a missing Determined is an error.
"""

import importlib.util
import os
import pathlib

import pytest


def _installed() -> bool:
    try:
        return importlib.util.find_spec("determined") is not None
    except ImportError:  # an import hook that refuses it
        return False


_WHY = (
    "the parity tests compare with the real Determined 0.38.1, which is not installed: "
    "pip install -e '.[interop]' (or bash scripts/setup.sh test)"
)


class _Unavailable(pytest.Item):
    """Stands for a module of this folder that cannot be imported without Determined: skipped
    (its marker's condition) while Determined is missing; if it ever ran, it fails saying so."""

    def runtest(self) -> None:
        raise RuntimeError(_WHY)

    def reportinfo(self):  # type: ignore[override]
        return self.path, 0, f"{self.path.name}: needs the real Determined"


class _NeedsDetermined(pytest.Module):
    """A test module of this folder, reported as one skipped item instead of failing to import."""

    def collect(self):  # type: ignore[override]
        item = _Unavailable.from_parent(self, name="needs_the_real_determined")
        item.add_marker(pytest.mark.skipif(not _installed(), reason=_WHY))
        return [item]


def pytest_pycollect_makemodule(module_path: pathlib.Path, parent: pytest.Collector):
    if _installed():
        return None  # pytest's own
    if os.environ.get("DET_LIGHTNING_REQUIRE_INTEROP") == "1":
        raise pytest.UsageError(_WHY + "; DET_LIGHTNING_REQUIRE_INTEROP=1 forbids skipping them")
    return _NeedsDetermined.from_parent(parent, path=module_path)
