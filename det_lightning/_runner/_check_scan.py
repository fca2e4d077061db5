"""What ``det-lightning check`` reads in a project's code without running it: the Determined
names it uses that det_lightning refuses (``_refused.REFUSED``, with what to use instead), and
the packages it imports that this environment lacks.

Both come from the syntax tree of the ``.py`` files an experiment's entrypoint reaches
(``entry_files``: its module or script and, transitively, the project's modules they import;
every file under the model directory when the entrypoint names none of them)::

    import determined as det            det -> determined
    from determined import pytorch      pytorch -> determined.pytorch
    det.core.init(...)                  determined.core.init: refused (det.core's contexts
                                        talk to a master)
    import requests                     requests: missing where no module of that name is found

An import inside ``try:`` is optional (the code handles its absence) and is not reported, nor is
a module of the project itself, nor ``determined`` (det_lightning answers to it).
"""

import ast
import dataclasses
import importlib.util
import pathlib
import sys
from typing import Dict, Iterator, List, Optional, Tuple

from det_lightning._refused import REFUSED

SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages", "checkpoints", "tensorboard"}


@dataclasses.dataclass(frozen=True)
class Use:
    """A name the code uses, and where (``file.py:line``)."""

    name: str
    where: str


def python_files(model_dir: pathlib.Path) -> List[pathlib.Path]:
    """The ``.py`` files under ``model_dir``, hidden and generated folders left out."""
    found = []
    for path in sorted(model_dir.rglob("*.py")):
        parts = path.relative_to(model_dir).parts[:-1]
        if not any(p.startswith(".") or p in SKIPPED_DIRS for p in parts):
            found.append(path)
    return found


class _Reader(ast.NodeVisitor):
    """Collects the imports of one file and the ``determined`` names it reaches."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.aliases: Dict[str, str] = {}  # local name -> dotted determined name
        self.imports: List[Tuple[str, int]] = []  # top-level modules imported outside try
        self.determined: List[Use] = []
        self._in_try = 0

    def _at(self, node: ast.AST) -> str:
        return f"{self.where}:{getattr(node, 'lineno', 0)}"

    def visit_Try(self, node: ast.Try) -> None:
        self._in_try += 1
        for statement in node.body:
            self.visit(statement)
        self._in_try -= 1
        for other in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(other)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._imported(alias.name, node)
            if alias.name.split(".")[0] == "determined":
                self.aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else "determined"
                )
                self.determined.append(Use(alias.name, self._at(node)))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # a relative import: the project's own
        self._imported(node.module, node)
        if node.module.split(".")[0] != "determined":
            return
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            self.aliases[alias.asname or alias.name] = full
            self.determined.append(Use(full, self._at(node)))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            if head in self.aliases and rest:
                self.determined.append(Use(f"{self.aliases[head]}.{rest}", self._at(node)))
                return  # the chain's inner attributes are prefixes of this one
        self.generic_visit(node)

    def _imported(self, module: str, node: ast.AST) -> None:
        if not self._in_try:
            self.imports.append((module.split(".")[0], getattr(node, "lineno", 0)))


def _dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for an attribute chain on a plain name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def entry_files(
    model_dir: pathlib.Path, trial_class: Optional[str], command: Optional[List[str]]
) -> Optional[List[pathlib.Path]]:
    """The project's ``.py`` files the entrypoint reaches: the module of ``trial_class``
    (``pkg.model_def:Trial``) or the script of ``command`` (``python3 train.py``, ``-m
    pkg.train``), and the project's modules they import, transitively (a module that imports
    another only inside a function counts too). None when the entrypoint names no file of the
    project: then every file is read."""
    start: List[pathlib.Path] = []
    if trial_class is not None:
        start = _module_files(model_dir, trial_class.partition(":")[0])
    elif command:
        script = next((w for w in command if w.endswith(".py")), None)
        if script is not None and (model_dir / script).is_file():
            start = [model_dir / script]
        elif "-m" in command[:-1]:
            start = _module_files(model_dir, command[command.index("-m") + 1])
    if not start:
        return None
    seen: Dict[pathlib.Path, None] = {}
    pending = [p.resolve() for p in start]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen[path] = None
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for module in _imported_modules(tree, path, model_dir):
            pending += [p.resolve() for p in _module_files(model_dir, module)]
    return sorted(seen)


def _imported_modules(tree: ast.AST, path: pathlib.Path, model_dir: pathlib.Path) -> List[str]:
    """The dotted names ``path`` imports (``from . import x`` made absolute under
    ``model_dir``), each also as ``module.name`` for a ``from module import name``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = path.parent
                for _ in range(node.level - 1):
                    package = package.parent
                try:
                    parts = list(package.resolve().relative_to(model_dir.resolve()).parts)
                except ValueError:
                    continue
                base = ".".join([*parts, *([base] if base else [])])
            found += [base] if base else []
            found += [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
    return found


def _module_files(model_dir: pathlib.Path, module: str) -> List[pathlib.Path]:
    """The project's files that importing ``module`` runs: each package on its dotted path
    (``__init__.py``) and the module itself; none for a module from elsewhere."""
    files: List[pathlib.Path] = []
    folder = model_dir
    for part in module.split("."):
        if not part:
            return files
        if (folder / f"{part}.py").is_file():
            files.append(folder / f"{part}.py")
            return files
        if not (folder / part / "__init__.py").is_file() and not (folder / part).is_dir():
            return files
        folder = folder / part
        if (folder / "__init__.py").is_file():
            files.append(folder / "__init__.py")
    return files


def _read(model_dir: pathlib.Path, files: Optional[List[pathlib.Path]] = None) -> Iterator[_Reader]:
    for path in python_files(model_dir) if files is None else files:
        try:
            shown = str(path.resolve().relative_to(model_dir.resolve()))
        except ValueError:
            shown = str(path)
        reader = _Reader(shown)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # the import step reports a file that does not compile
        reader.visit(tree)
        yield reader


def refused_names(model_dir: pathlib.Path, files: Optional[List[pathlib.Path]] = None) -> List[str]:
    """``name (file.py:line): what to use instead`` for each refused Determined name the code
    under ``model_dir`` uses (the first use of each); ``files``: only those (``entry_files``)."""
    found: Dict[str, str] = {}
    for reader in _read(model_dir, files):
        for use in reader.determined:
            refused = _refused_prefix(use.name)
            if refused is not None and refused not in found:
                found[refused] = f"{refused} ({use.where}): {REFUSED[refused]}"
    return list(found.values())


def core_api_loop(model_dir: pathlib.Path, files: Optional[List[pathlib.Path]] = None) -> bool:
    """Whether the code is a Core API loop: it calls ``core.init()`` and never
    ``pytorch.init()`` or ``pytorch.Trainer`` (whose ``fit()`` has a test mode)."""
    used = {use.name for reader in _read(model_dir, files) for use in reader.determined}
    trainer = any(
        name.startswith(("determined.pytorch.init", "determined.pytorch.Trainer")) for name in used
    )
    return "determined.core.init" in used and not trainer


def _refused_prefix(name: str) -> Optional[str]:
    """The refused name ``name`` is or lies under (``determined.core.init`` ->
    ``determined.core``, where ``determined.core`` is refused), else None."""
    parts = name.split(".")
    for end in range(2, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix in REFUSED:
            return prefix
    return None


def missing_packages(
    model_dir: pathlib.Path, files: Optional[List[pathlib.Path]] = None
) -> List[str]:
    """``module (file.py:line)`` for each module the code imports that no installed package,
    nor the project itself, provides; ``files``: only those (``entry_files``)."""
    local = {p.stem for p in model_dir.glob("*.py")} | {
        p.name for p in model_dir.iterdir() if p.is_dir()
    }
    missing: Dict[str, str] = {}
    for reader in _read(model_dir, files):
        for module, line in reader.imports:
            if module in missing or module in local or module == "determined":
                continue
            if module in sys.stdlib_module_names or _installed(module):
                continue
            missing[module] = f"{module} ({reader.where}:{line})"
    return list(missing.values())


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


__all__ = ["core_api_loop", "entry_files", "missing_packages", "python_files", "refused_names"]
