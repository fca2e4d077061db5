"""Let unmodified Determined code ``import determined`` and get det_lightning.

Calling :func:`install` puts an import hook at the front of ``sys.meta_path`` so that every
``determined[.X.Y]`` import resolves to ``det_lightning[.X.Y]``. The alias modules *are* the
det_lightning modules, so identity and ``isinstance`` checks hold::

    from det_lightning import compat
    compat.install()

    import determined as det
    from determined.pytorch import PyTorchTrial   # det_lightning.pytorch.PyTorchTrial

The hook is opt-in: importing det_lightning never installs it, so a process that has the real
``determined`` installed keeps getting the real one until :func:`install` is called.

Import forms and what they resolve to:

* ``import determined`` / ``import determined as det`` -> ``det_lightning``.
* ``import determined.pytorch.samplers`` -> ``det_lightning.pytorch.samplers``.
* ``from determined import pytorch`` -> ``det_lightning.pytorch`` (Python resolves the name
  against the aliased package, whose real name is ``det_lightning``).
* A submodule det_lightning lacks (``determined.keras``) raises ``ModuleNotFoundError`` whose
  message names both modules.
"""

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Iterator, List, Optional, Sequence

from det_lightning import _refused

_ALIAS = "determined"
_TARGET = "det_lightning"

# ``loader_state`` marker for a det_lightning submodule that no other finder can locate.
_MISSING = object()


class RealDeterminedImportedError(RuntimeError):
    """The real ``determined`` package was imported before :func:`install` was called."""


def _alias_to_target(name: str) -> str:
    """``determined.X.Y`` -> ``det_lightning.X.Y``."""
    return _TARGET + name[len(_ALIAS) :]


def _target_to_alias(name: str) -> str:
    """``det_lightning.X.Y`` -> ``determined.X.Y``."""
    return _ALIAS + name[len(_TARGET) :]


def _is_under(name: str, root: str) -> bool:
    """Whether ``name`` is ``root`` or one of its submodules."""
    return name == root or name.startswith(root + ".")


def _missing_module_error(alias_name: str, as_module: bool = True) -> ModuleNotFoundError:
    """The error for a ``determined`` name that det_lightning has no counterpart for.

    Args:
        alias_name: the ``determined.*`` name that was asked for.
        as_module: whether it was imported as a module (``import determined.keras``) rather
            than through ``from determined.pkg import name``, where it may be a class.
    """
    target = _alias_to_target(alias_name)
    lead = "No module named" if as_module else "cannot import"
    why = _refused.reason(alias_name)
    if why is not None:  # a module det_lightning refuses on purpose: say why, and what to use
        return ModuleNotFoundError(
            f"{lead} {alias_name!r}: not provided by det_lightning: {why}.", name=alias_name
        )
    message = (
        f"{lead} {alias_name!r}: det_lightning runs PyTorchTrial code only; "
        f"{alias_name} has no equivalent (det_lightning does not provide {target!r}). "
        "Remove that import, or run this code under the real Determined in a process where "
        "det_lightning.compat.install() was not called."
    )
    return ModuleNotFoundError(message, name=alias_name)


class _DeterminedAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta-path finder and loader mapping ``determined.*`` onto ``det_lightning.*``."""

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]],
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        """Claim every ``determined`` name, and flag det_lightning submodules that do not exist.

        Args:
            fullname: the dotted module name being imported.
            path: the parent package's ``__path__`` (None for top-level names).
            target: the module being reloaded, if any.

        Returns:
            A spec loaded by this object, or None to let the other finders handle the name.
        """
        if _is_under(fullname, _ALIAS):
            return importlib.util.spec_from_loader(fullname, self)
        if self._is_missing_target(fullname, path, target):
            # ``from determined import keras`` asks for ``det_lightning.keras`` directly;
            # answer with the same clear message that ``import determined.keras`` gets.
            spec = importlib.util.spec_from_loader(fullname, self)
            if spec is not None:
                spec.loader_state = _MISSING
            return spec
        return None

    def _is_missing_target(
        self,
        fullname: str,
        path: Optional[Sequence[str]],
        target: Optional[types.ModuleType],
    ) -> bool:
        """Whether ``fullname`` is an unknown det_lightning submodule asked for via the alias.

        Only names whose parent package is imported as ``determined`` count, so det_lightning's
        own imports are untouched until user code imports ``determined``.
        """
        if not fullname.startswith(_TARGET + "."):
            return False
        alias_parent = _target_to_alias(fullname.rpartition(".")[0])
        if not _is_aliased(alias_parent, sys.modules.get(alias_parent)):
            return False  # nobody imported the parent as ``determined``: stay out of the way
        return not self._found_elsewhere(fullname, path, target)

    def _found_elsewhere(
        self,
        fullname: str,
        path: Optional[Sequence[str]],
        target: Optional[types.ModuleType],
    ) -> bool:
        """Whether any other meta-path finder can locate ``fullname``."""
        for finder in list(sys.meta_path):
            if isinstance(finder, _DeterminedAliasFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None and find_spec(fullname, path, target) is not None:
                return True
        return False

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        """Import and return the det_lightning module that ``spec.name`` stands for.

        Args:
            spec: the spec returned by :meth:`find_spec`.

        Returns:
            The existing ``det_lightning`` module object (not a copy).

        Raises:
            ModuleNotFoundError: det_lightning has no such module.
        """
        if spec.loader_state is _MISSING:
            raise _missing_module_error(_target_to_alias(spec.name), as_module=False)
        target = _alias_to_target(spec.name)
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name in (target, spec.name):
                raise _missing_module_error(spec.name) from None
            raise
        # The import system overwrites ``__spec__`` after this call; keep the real one to put
        # back in ``exec_module`` so det_lightning's own modules keep their own identity.
        spec.loader_state = module.__spec__
        return module

    def get_code(self, fullname: str) -> Optional[types.CodeType]:
        """The code of the det_lightning module ``fullname`` stands for: what ``runpy`` runs
        as ``__main__`` for ``python -m determined.launch.wrap_rank`` (a launcher-style
        script's command) in an interpreter where the alias is installed.

        Raises:
            ModuleNotFoundError: det_lightning has no such module.
        """
        target = _alias_to_target(fullname)
        spec = importlib.util.find_spec(target)
        if spec is None or spec.loader is None:
            raise _missing_module_error(fullname)
        get_code = getattr(spec.loader, "get_code", None)
        return get_code(target) if get_code is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        """Restore the det_lightning module's own ``__spec__``; it is already executed.

        Args:
            module: the module returned by :meth:`create_module`.
        """
        alias_spec = module.__spec__
        if alias_spec is not None and alias_spec.loader is self:
            module.__spec__ = alias_spec.loader_state


def _installed_finders() -> List[_DeterminedAliasFinder]:
    """The alias finders currently on ``sys.meta_path``."""
    return [f for f in sys.meta_path if isinstance(f, _DeterminedAliasFinder)]


def _is_aliased(name: str, module: Optional[types.ModuleType]) -> bool:
    """Whether ``sys.modules[name]`` is a det_lightning module placed there by the alias."""
    real_name = getattr(module, "__name__", None)
    return isinstance(real_name, str) and real_name == _alias_to_target(name)


def _foreign_determined_modules() -> List[str]:
    """``determined`` entries in ``sys.modules`` that are not det_lightning aliases."""
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if _is_under(name, _ALIAS) and module is not None and not _is_aliased(name, module)
    )


def _check_real_determined_absent() -> None:
    """Raise when the real ``determined`` is already imported into this process."""
    foreign = _foreign_determined_modules()
    if not foreign:
        return
    location = getattr(sys.modules.get(foreign[0]), "__file__", None) or "unknown location"
    raise RealDeterminedImportedError(
        f"The real 'determined' package is already imported ({foreign[0]} from {location}), "
        "so det_lightning cannot stand in for it in this process. Fix: call "
        "det_lightning.compat.install() before anything imports determined (first thing in "
        "your entry script), or `pip uninstall determined`, or run the det_lightning code in "
        "a separate process."
    )


def module_name(name: str) -> str:
    """The det_lightning module that ``name`` resolves to under the alias (else ``name``).

    >>> module_name("determined.launch.torch_distributed"), module_name("pkg.train")
    ('det_lightning.launch.torch_distributed', 'pkg.train')
    """
    return _alias_to_target(name) if _is_under(name, _ALIAS) else name


def is_installed() -> bool:
    """Whether the ``determined`` -> ``det_lightning`` alias is active.

    Returns:
        True when the alias finder is on ``sys.meta_path``.
    """
    return bool(_installed_finders())


def install() -> None:
    """Make ``import determined[.X]`` resolve to ``det_lightning[.X]``. Idempotent.

    Raises:
        RealDeterminedImportedError: the real ``determined`` is already imported here.
    """
    if is_installed():
        return
    _check_real_determined_absent()
    sys.meta_path.insert(0, _DeterminedAliasFinder())
    importlib.invalidate_caches()


def uninstall() -> None:
    """Remove the alias finder and the ``determined`` entries it added to ``sys.modules``.

    The det_lightning modules themselves stay imported; a later ``import determined`` finds
    whatever package is installed under that name.
    """
    for finder in _installed_finders():
        sys.meta_path.remove(finder)
    for name, module in list(sys.modules.items()):
        if _is_under(name, _ALIAS) and _is_aliased(name, module):
            del sys.modules[name]
    importlib.invalidate_caches()


@contextlib.contextmanager
def aliased() -> Iterator[None]:
    """Context manager: the alias is active inside the block (for tests).

    If it was already installed on entry, it is left installed on exit.

    Yields:
        None.
    """
    was_installed = is_installed()
    install()
    try:
        yield
    finally:
        if not was_installed:
            uninstall()


__all__ = [
    "RealDeterminedImportedError",
    "aliased",
    "install",
    "is_installed",
    "module_name",
    "uninstall",
]
