"""The layering of the package: for each layer, the layers it may import (an allow-list).

A module belongs to the layer with the longest prefix of its name (so
``det_lightning.pytorch._trainer`` is an entry point while the rest of
``det_lightning.pytorch`` is the API); a package's ``__init__.py`` re-exports belong to none (a
name imported through a package counts as its defining module, as in the cycle test). Every
import counts, also one inside a function; imports under ``if TYPE_CHECKING:`` do not.
``docs/architecture.md`` shows the picture ``draw()`` makes of these tables.
"""

import pathlib
import textwrap
from typing import Dict, List, Optional, Tuple

from tests.unit.test_import_graph import SOURCES, ModuleGraph, _within, _write, find_modules

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The layers, top to bottom: (what the layer is, the prefixes of its modules).
LAYERS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "commands": (
        "det-lightning and python -m det_lightning.launch.torch_distributed",
        ("det_lightning.__main__", "det_lightning.launch"),
    ),
    "runner": (
        "the experiment runner: experiments, searches, one trial, the config; the client that reads them",
        ("det_lightning._runner", "det_lightning.experimental"),
    ),
    "entry": (
        "what starts Lightning: Trainer.fit(), init(), and TorchWriter on them",
        (
            "det_lightning.pytorch._trainer",
            "det_lightning.pytorch._launch",
            "det_lightning.pytorch._determinism",
            "det_lightning.tensorboard",
        ),
    ),
    "bridge": (
        "the bridge onto Lightning (the root folder adapters/)",
        ("det_lightning.adapters",),
    ),
    "api": (
        "Determined's API without Lightning: the trial, the context, checkpoints, data, values, DetCallback",
        (
            "det_lightning.pytorch",
            "det_lightning.core",
            "det_lightning.transformers",
            "det_lightning.util",
            "det_lightning.compat",
            "det_lightning._trial_context",
            "det_lightning._info",
            "det_lightning._refused",
            "det_lightning._refused_attributes",
            "det_lightning._relaunch",
        ),
    ),
    "leaves": (
        "what many modules need: errors, environment variable names, on/off settings, seeds, the job's process count",
        (
            "det_lightning.errors",
            "det_lightning._env",
            "det_lightning._switch",
            "det_lightning._import",
            "det_lightning._job_processes",
            "det_lightning.pytorch._seeds",
        ),
    ),
}

# The allow-list: the layers each layer's modules may import. Nothing imports a layer above
# it: the bridge never calls back into fit() or the runner, the API (pytorch/_remote.py, the
# context) never imports the bridge, and the leaves import nothing of ours.
MAY_IMPORT: Dict[str, Tuple[str, ...]] = {
    "commands": ("commands", "runner", "entry", "bridge", "api", "leaves"),
    "runner": ("runner", "entry", "bridge", "api", "leaves"),
    "entry": ("entry", "bridge", "api", "leaves"),
    "bridge": ("bridge", "api", "leaves"),
    "api": ("api", "leaves"),
    "leaves": (),
}


def layer_of(name: str, layers: Dict[str, Tuple[str, Tuple[str, ...]]]) -> Optional[str]:
    """The layer with the longest prefix of ``name``, or None."""
    found = [
        (len(prefix), layer)
        for layer, (_, prefixes) in layers.items()
        for prefix in prefixes
        if _within(name, prefix)
    ]
    return max(found)[1] if found else None


def layering_violations(
    graph: ModuleGraph,
    layers: Dict[str, Tuple[str, Tuple[str, ...]]],
    may_import: Dict[str, Tuple[str, ...]],
) -> List[str]:
    """Each module in no layer, and each import the allow-list does not allow."""
    wrong = []
    for source in sorted(graph.modules):
        if graph.modules[source].name == "__init__.py":
            continue  # re-exports: counted where they are used
        here = layer_of(source, layers)
        if here is None:
            wrong.append(f"{source}: in no layer (add its prefix to LAYERS)")
            continue
        for target in sorted(graph.edges[source]):
            there = layer_of(target, layers)
            if there not in may_import[here]:
                wrong.append(f"{source} ({here}) -> {target} ({there})")
    return wrong


def _place(prefix: str, root: pathlib.Path, modules: Dict[str, pathlib.Path]) -> str:
    """Where ``prefix``'s modules are in the repository: a file, or a folder with a slash."""
    path = modules[prefix].relative_to(root)
    return f"{path.parent}/" if path.name == "__init__.py" else str(path)


def draw(
    layers: Dict[str, Tuple[str, Tuple[str, ...]]],
    may_import: Dict[str, Tuple[str, ...]],
    root: pathlib.Path,
    modules: Dict[str, pathlib.Path],
) -> str:
    """The layers as a picture, top to bottom: what each is, its files, what it imports."""
    blocks = []
    for layer, (what, prefixes) in layers.items():
        below = [other for other in may_import[layer] if other != layer]
        places = ", ".join(_place(prefix, root, modules) for prefix in prefixes)
        lines = [f"{layer:<10}{what}"]
        lines += textwrap.wrap(places, 96, initial_indent=" " * 10, subsequent_indent=" " * 10)
        lines.append(f"{'':<10}imports: {', '.join(below) or 'nothing of ours'}")
        blocks.append("\n".join(lines))
    return "\n   |\n".join(blocks) + "\n"


def test_each_layer_imports_only_what_its_allow_list_names() -> None:
    graph = ModuleGraph(find_modules(ROOT, SOURCES))
    assert len(graph.modules) > 100  # the walk found the tree (both source folders)
    wrong = layering_violations(graph, LAYERS, MAY_IMPORT)
    assert not wrong, "imports against the layering (tests/unit/test_layers.py):\n" + "\n".join(
        wrong
    )


def test_the_notes_show_the_layering_the_test_checks() -> None:
    picture = draw(LAYERS, MAY_IMPORT, ROOT, find_modules(ROOT, SOURCES))
    notes = (ROOT / "docs" / "architecture.md").read_text()
    assert f"```\n{picture}```" in notes, "docs/architecture.md should show:\n" + picture


def test_the_checker_finds_imports_against_the_allow_list(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.api.remote import x\n",  # a re-export: no layer
            "pkg/api/__init__.py": "",
            "pkg/api/entry.py": "from pkg.bridge import fit\n",  # entry: longest prefix
            "pkg/api/remote.py": "def f():\n    from pkg.bridge import fit\n",  # upward
            "pkg/api/value.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from pkg.bridge import fit\n",  # never runs: allowed
            "pkg/bridge.py": "from pkg.api import value\n",
            "pkg/stray.py": "",
        },
    )
    layers = {
        "entry": ("", ("pkg.api.entry",)),
        "bridge": ("", ("pkg.bridge",)),
        "api": ("", ("pkg.api",)),
    }
    may_import = {"entry": ("bridge", "api"), "bridge": ("api",), "api": ("api",)}
    graph = ModuleGraph(find_modules(tmp_path, {"pkg": "pkg"}))
    assert layering_violations(graph, layers, may_import) == [
        "pkg.api.remote (api) -> pkg.bridge (bridge)",
        "pkg.stray: in no layer (add its prefix to LAYERS)",
    ]
