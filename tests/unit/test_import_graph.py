"""The module graph has no cycle: every import counts, also the ones inside functions.

An import inside a function only delays a dependency; it still ties the two modules together (a
change to either can break the other, and neither can be read without the other). Not counted:
imports under ``if TYPE_CHECKING:`` (they never run), and a package's ``__init__.py`` re-exports
(a name imported through a package is resolved to the module that defines it).
"""

import ast
import pathlib
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Source folder -> the package name it installs as (pyproject.toml's package-dir).
SOURCES = {"det_lightning": "det_lightning", "adapters": "det_lightning.adapters"}


def find_modules(root: pathlib.Path, sources: Dict[str, str]) -> Dict[str, pathlib.Path]:
    """Every module under the source folders, by dotted name (a package by its own name)."""
    found: Dict[str, pathlib.Path] = {}
    for folder, package in sources.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def imported_names(module: str, path: pathlib.Path) -> Iterator[Tuple[str, Optional[str]]]:
    """(module, name) for each ``from module import name`` and (module, None) for each
    ``import module``, anywhere in the file except under ``if TYPE_CHECKING:``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    pending: List[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield from ((base, alias.name) for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))


class ModuleGraph:
    """Which of our modules each of our modules imports."""

    def __init__(self, modules: Dict[str, pathlib.Path]) -> None:
        self.modules = modules
        self._imports = {name: list(imported_names(name, path)) for name, path in modules.items()}
        self.edges: Dict[str, Set[str]] = {name: set() for name in modules}
        for name in modules:
            if self._is_package(name):
                continue  # re-exports: resolved where they are used
            for target, attr in self._imports[name]:
                found = self._resolve(target, attr, frozenset())
                if found is not None and found != name and not self._is_package(found):
                    self.edges[name].add(found)

    def _is_package(self, name: str) -> bool:
        return self.modules[name].name == "__init__.py"

    def _resolve(self, target: str, attr: Optional[str], seen: frozenset) -> Optional[str]:
        """The module that defines ``target.attr``: a submodule, a name a package re-exports
        (followed to where it comes from), or ``target`` itself."""
        if attr is not None and f"{target}.{attr}" in self.modules:
            return f"{target}.{attr}"
        if target not in self.modules:
            return None
        if attr is not None and self._is_package(target) and (target, attr) not in seen:
            for source, name in self._imports[target]:
                if name == attr:
                    found = self._resolve(source, name, seen | {(target, attr)})
                    if found is not None:
                        return found
        return target

    def cycles(self) -> List[List[str]]:
        """The strongly connected components with more than one module (Tarjan's algorithm,
        iterative), each sorted, largest first."""
        index: Dict[str, int] = {}
        low: Dict[str, int] = {}
        stack: List[str] = []
        on_stack: Set[str] = set()
        components: List[List[str]] = []
        for start in sorted(self.modules):
            if start in index:
                continue
            work = [(start, iter(sorted(self.edges[start])))]
            index[start] = low[start] = len(index)
            stack.append(start)
            on_stack.add(start)
            while work:
                node, successors = work[-1]
                advanced = False
                for successor in successors:
                    if successor not in index:
                        index[successor] = low[successor] = len(index)
                        stack.append(successor)
                        on_stack.add(successor)
                        work.append((successor, iter(sorted(self.edges[successor]))))
                        advanced = True
                        break
                    if successor in on_stack:
                        low[node] = min(low[node], index[successor])
                if advanced:
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
        return sorted(components, key=lambda c: (-len(c), c))

    def describe(self, component: List[str]) -> str:
        members = set(component)
        return "\n".join(
            f"  {name} -> {', '.join(sorted(self.edges[name] & members))}" for name in component
        )


def test_the_package_has_no_import_cycle() -> None:
    graph = ModuleGraph(find_modules(ROOT, SOURCES))
    assert len(graph.modules) > 100  # the walk found the tree (both source folders)
    cycles = graph.cycles()
    assert not cycles, "import cycles (module -> the modules of its cycle it imports):\n" + (
        "\n\n".join(graph.describe(c) for c in cycles)
    )


def _write(root: pathlib.Path, files: Dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    "files, expected",
    [
        pytest.param(  # a lazy import inside a function closes the cycle
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from pkg import b\n",
                "pkg/b.py": "def f():\n    from pkg.a import x\n",
            },
            [["pkg.a", "pkg.b"]],
            id="lazy-import",
        ),
        pytest.param(  # relative imports, through three modules
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from .b import y\n",
                "pkg/b.py": "from . import c\n",
                "pkg/c.py": "import pkg.a\n",
            },
            [["pkg.a", "pkg.b", "pkg.c"]],
            id="relative-three",
        ),
        pytest.param(  # a name re-exported by a package counts as its defining module
            {
                "pkg/__init__.py": "from pkg._impl import Thing\n",
                "pkg/_impl.py": "def f():\n    from pkg.user import g\n",
                "pkg/user.py": "from pkg import Thing\n",
            },
            [["pkg._impl", "pkg.user"]],
            id="re-export",
        ),
        pytest.param(  # TYPE_CHECKING imports never run
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from pkg import b\n",
                "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from pkg.a import x\n",
            },
            [],
            id="type-checking",
        ),
        pytest.param(  # a package importing its own modules is not a cycle with them
            {
                "pkg/__init__.py": "from pkg.a import x\n",
                "pkg/a.py": "from pkg.b import y\n",
                "pkg/b.py": "x = 1\n",
            },
            [],
            id="package-re-exports",
        ),
    ],
)
def test_the_counter_finds_cycles_as_described(
    tmp_path: pathlib.Path, files: Dict[str, str], expected: List[List[str]]
) -> None:
    _write(tmp_path, files)
    graph = ModuleGraph(find_modules(tmp_path, {"pkg": "pkg"}))
    assert graph.cycles() == expected


def test_the_config_is_read_raw_only_inside_the_config_package() -> None:
    """One typed value is built from the experiment config; everything else reads it."""
    readers = []
    for name, path in find_modules(ROOT, SOURCES).items():
        if ".config" in name or "._config" in name:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ".raw[" in line or ".raw.get(" in line:
                readers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not readers, "raw config reads outside the config package:\n" + "\n".join(readers)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# One trial (and the checks before it) sits below the search that runs many: what these
# modules import, directly or through others, is never in ``_runner/search/``.
BELOW_THE_SEARCH = ["det_lightning._runner.trial", "det_lightning._runner.plan"]
SEARCH = "det_lightning._runner.search"


def import_chain(graph: ModuleGraph, start: str, prefix: str) -> Optional[List[str]]:
    """The shortest chain of imports from ``start`` to a module under ``prefix``, or None."""
    parents: Dict[str, Optional[str]] = {start: None}
    queue = [start]
    while queue:
        name = queue.pop(0)
        if name != start and _within(name, prefix):
            chain = [name]
            while parents[chain[-1]] is not None:
                chain.append(parents[chain[-1]])  # type: ignore[arg-type]
            return chain[::-1]
        for target in sorted(graph.edges[name]):
            if target not in parents:
                parents[target] = name
                queue.append(target)
    return None


def test_one_trial_sits_below_the_search() -> None:
    graph = ModuleGraph(find_modules(ROOT, SOURCES))
    chains = [import_chain(graph, start, SEARCH) for start in BELOW_THE_SEARCH]
    wrong = [" -> ".join(chain) for chain in chains if chain is not None]
    assert not wrong, "one trial reaches up into the search:\n" + "\n".join(wrong)


def test_the_chain_finder_follows_imports_through_other_modules(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/trial.py": "from pkg import leaf\n",
            "pkg/leaf.py": "def f():\n    from pkg.search.worker import g\n",
            "pkg/search/__init__.py": "",
            "pkg/search/worker.py": "from pkg import trial\n",
        },
    )
    graph = ModuleGraph(find_modules(tmp_path, {"pkg": "pkg"}))
    assert import_chain(graph, "pkg.trial", "pkg.search") == [
        "pkg.trial",
        "pkg.leaf",
        "pkg.search.worker",
    ]
    assert import_chain(graph, "pkg.search.worker", "pkg.nothing") is None
