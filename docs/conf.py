"""Sphinx configuration of det_lightning's documentation site.

Built by ``scripts/test.sh`` with warnings as errors:
``python -m sphinx -W --keep-going -n -b html docs docs/_build/html``. Kept lean for CI: no
extension outside Sphinx besides the theme and the Markdown parser, and ``lightning`` is not
imported (``det_lightning`` never imports it at module level; the bridge's few public names
are documented with it mocked).
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # a checkout without an install still documents its own code

import det_lightning  # noqa: E402

project = "det_lightning"
author = "det_lightning contributors"
release = version = det_lightning.__version__

extensions = [
    "myst_parser",  # Markdown pages, as the README is
    "sphinx.ext.autodoc",  # the Reference from the docstrings
    "sphinx.ext.napoleon",  # which are Google-style
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to a page's sections by their title

html_theme = "furo"
html_title = "det_lightning"

autodoc_mock_imports = ["lightning", "pytorch_lightning", "transformers"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Annotations name other projects' types; the site links only to its own (no intersphinx:
# CI builds offline). Every other missing reference is an error (-n -W).
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(torch|lightning|numpy|np|optuna|transformers|argparse|logging|pathlib|os|types)(\..*)?",
    ),
    (r"py:.*", r"(typing|collections\.abc|contextlib|abc|enum|datetime)\..*"),
    (r"py:class", r"(Any|Callable|Dict|List|Optional|Tuple|Union|Sequence|Iterator|Iterable)"),
    (r"py:class", r"(Mapping|Type|TypeVar|Generator|Set|FrozenSet|T|_T|NoneType|ellipsis)"),
    (r"py:class", r"(builtins\.)?(object|BaseException|Exception|ModuleType|Path)"),
    (r"py:class", r"det_lightning\..*\._[A-Za-z].*"),  # private types named in annotations
    (r"py:class", r"det_lightning\.adapters\..*"),  # the bridge's Lightning-side bases
    (r"py:class", r"InvalidHPExit"),  # named in InvalidHP's docstring, documented beside it
]
