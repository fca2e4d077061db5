"""Every example in a docstring of the package is true."""

import doctest
import importlib
import pathlib

import pytest

import det_lightning

PACKAGE = pathlib.Path(det_lightning.__file__).parent
ADAPTERS = PACKAGE.parent / "adapters"


def _modules() -> list:
    names = []
    for root, prefix in ((PACKAGE, "det_lightning"), (ADAPTERS, "det_lightning.adapters")):
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            # __main__ runs the CLI; _alias/determined is the stand-in package a trial's own
            # processes import as `determined` (importing it here would alias this process).
            if parts[-1] == "__main__" or parts[0] == "_alias":
                continue
            names.append(".".join((prefix, *parts)).removesuffix(".__init__"))
    return names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_the_doctest_sweep_sees_the_modules_with_examples() -> None:
    names = _modules()
    assert (
        "det_lightning.pytorch._units" in names and "det_lightning.adapters.trainer_args" in names
    )
    assert len(names) > 30
