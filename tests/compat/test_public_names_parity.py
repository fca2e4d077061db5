"""Every public name of the Determined 0.38.1 modules a trial imports, and what det_lightning
does with it: provided (the same path under ``det_lightning``, and under ``determined`` through
``compat.install()``, as the same object) or refused with an error saying why and what to use
(``det_lightning/_refused.py``).

A module's public names are read from Determined's source, not from ``dir()`` (which depends on
what happened to be imported): what its top level defines or assigns, what a package's
``__init__`` re-exports from ``determined``, and a package's submodules; names starting with
``_`` are private. A name Determined gains that is in neither list fails
:func:`test_every_public_name_is_classified`.
"""

import ast
import importlib
import importlib.util
import json
import pathlib
import pkgutil
import subprocess
import sys
from typing import Dict, Iterator, List, Set

import pytest

import det_lightning
from det_lightning import _refused, errors

pytestmark = pytest.mark.interop

# What det_lightning provides, module by module: every name here resolves under both paths.
PROVIDED: Dict[str, Set[str]] = {
    "determined": {
        "ClusterInfo",
        "InvalidHP",
        "LOG_FORMAT",
        "TrialContext",
        "TrialInfo",
        "core",
        "errors",
        "experimental",
        "get_cluster_info",
        "import_from_path",
        "launch",
        "pytorch",
        "tensorboard",
        "transformers",
        "util",
    },
    "determined.pytorch": {
        "Batch",
        "CheckpointLoadContext",
        "DataLoader",
        "Epoch",
        "LRScheduler",
        "MetricReducer",
        "PyTorchCallback",
        "PyTorchExperimentalContext",
        "PyTorchTrial",
        "PyTorchTrialContext",
        "Reducer",
        "TorchData",
        "TrainUnit",
        "Trainer",
        "adapt_batch_sampler",
        "data_length",
        "experimental",
        "init",
        "load_trial_from_checkpoint_path",
        "samplers",
        "to_device",
    },
    "determined.util": {
        "calculate_batch_sizes",
        "download_gcs_blob_with_backoff",
        "filter_duplicates",
        "force_create_symlink",
        "forward_signals",
        "get_member_func",
        "has_param",
        "humanize_float",
        "is_numerical_scalar",
        "is_overridden",
        "logger",
        "merge_dicts",
        "rmtree_nfs_safe",
    },
    "determined.core": {
        "CheckpointContext",
        "Context",
        "DistributedContext",
        "DownloadMode",
        "DummyCheckpointContext",
        "DummyDistributedContext",
        "DummyExperimentalCoreContext",
        "DummyPreemptContext",
        "DummyProfilerContext",
        "DummySearcherContext",
        "DummySearcherOperation",
        "DummyTrainContext",
        "EarlyExitReason",
        "ExperimentalCoreContext",
        "PreemptContext",
        "PreemptMode",
        "ProfilerContext",
        "SearcherContext",
        "SearcherMode",
        "SearcherOperation",
        "TensorboardMode",
        "TrainContext",
        "Unit",
        "init",
    },
    "determined.launch": {"torch_distributed", "wrap_rank"},
    "determined.launch.wrap_rank": {"main"},
    "determined.launch.torch_distributed": {"logger", "main", "parse_args"},
    "determined.experimental": {
        "Checkpoint",
        "Determined",
        "Experiment",
        "ExperimentReference",
        "Model",
        "ModelVersion",
        "OrderBy",
        "Project",
        "Trial",
        "TrialOrderBy",
        "TrialReference",
        "TrialSortBy",
        "client",
    },
    "determined.experimental.client": {
        "create_experiment",
        "get_checkpoint",
        "get_experiment",
        "get_trial",
        "iter_trials_metrics",
        "list_experiments",
        "logger",
        "login",
        "logout",
        "stream_trials_metrics",
        "stream_trials_validation_metrics",
    },
    "determined.transformers": {"DetCallback"},
    "determined.pytorch.experimental": {
        "TorchBatchProcessor",
        "TorchBatchProcessorContext",
        "get_default_device",
        "torch_batch_process",
    },
    "determined.tensorboard": {"metric_writers"},
    "determined.tensorboard.metric_writers": {"pytorch"},
    "determined.tensorboard.metric_writers.pytorch": {"TorchWriter"},
}
# Private in Determined but exported and used by public trials (they subclass it).
PROVIDED_PRIVATE = {"determined.pytorch": {"_SimpleReducer"}}
MODULES = sorted(PROVIDED)


def _top_level(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements at module level, looking inside ``if``/``try``/``with`` blocks."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for inner in getattr(node, block, []):
                    yield from _top_level(
                        inner.body if isinstance(inner, ast.ExceptHandler) else [inner]
                    )
        else:
            yield node


def _bound_names(node: ast.stmt, is_package: bool) -> Iterator[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        yield from (t.id for t in targets if isinstance(t, ast.Name))
    elif isinstance(node, ast.ImportFrom) and is_package:
        # A package re-exports what it imports from determined; a module's imports are its own.
        if node.level or (node.module or "").split(".")[0] == "determined":
            yield from (alias.asname or alias.name for alias in node.names)


def determined_public_names(module: str) -> Set[str]:
    """The public names of a Determined module, from its source."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    is_package = spec.submodule_search_locations is not None
    tree = ast.parse(pathlib.Path(spec.origin).read_text())
    names = {n for node in _top_level(tree.body) for n in _bound_names(node, is_package)}
    if is_package:
        names |= {info.name for info in pkgutil.iter_modules(spec.submodule_search_locations)}
    return {n for n in names if not n.startswith("_")}


def _refused_in(module: str) -> Set[str]:
    prefix = module + "."
    return {
        name[len(prefix) :]
        for name in _refused.REFUSED
        if name.startswith(prefix) and "." not in name[len(prefix) :]
    }


def _ours(module: str) -> str:
    return "det_lightning" + module[len("determined") :]


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_classified(module: str) -> None:
    public = determined_public_names(module)
    provided, refused = PROVIDED[module], _refused_in(module)
    assert not provided & refused, f"both provided and refused: {sorted(provided & refused)}"
    unclassified = public - provided - refused
    assert not unclassified, (
        f"{module} has public names det_lightning neither provides nor refuses: "
        f"{sorted(unclassified)}: add them to PROVIDED here, or to det_lightning/_refused.py"
    )
    stale = (provided | refused) - public
    assert not stale, f"not public names of {module} in Determined 0.38.1: {sorted(stale)}"


def test_the_walk_sees_what_determined_exports() -> None:
    """The source reading finds the names the modules really have (a check of the checker)."""
    import determined
    import determined.pytorch

    assert {"InvalidHP", "ClusterInfo", "LegacyTrial", "keras", "launch"} <= (
        determined_public_names("determined")
    )
    assert "metadata" not in determined_public_names("determined")  # importlib's, not theirs
    for module in (determined, determined.pytorch):
        exported = {
            n
            for n in vars(module)
            if not n.startswith("_")
            and getattr(getattr(module, n), "__module__", "determined").startswith("determined")
        }
        assert exported <= determined_public_names(module.__name__) | {"metadata"}


def _resolve(module: str, name: str) -> object:
    """``module.name``, importing it as a submodule when it is not an attribute yet."""
    parent = importlib.import_module(module)
    try:
        return getattr(parent, name)
    except AttributeError:
        return importlib.import_module(f"{module}.{name}")


@pytest.mark.parametrize("module", MODULES)
def test_provided_names_resolve_under_det_lightning(module: str) -> None:
    for name in sorted(PROVIDED[module] | PROVIDED_PRIVATE.get(module, set())):
        assert _resolve(_ours(module), name) is not None, name


@pytest.mark.parametrize("module", MODULES)
def test_refused_names_say_why_and_what_to_use(module: str) -> None:
    for name in sorted(_refused_in(module)):
        full = f"{module}.{name}"
        with pytest.raises(ImportError) as info:
            _resolve(_ours(module), name)
        assert _refused.REFUSED[full] in str(info.value), full
        assert isinstance(info.value, (errors.NotProvidedError, ModuleNotFoundError)), full


_THROUGH_ALIAS = """
import importlib, json, sys
from det_lightning import compat
compat.install()
provided, refused = json.loads(sys.argv[1]), json.loads(sys.argv[2])
bad = []
for module, names in provided.items():
    for name in names:
        parent = importlib.import_module(module)
        try:
            got = getattr(parent, name)
        except AttributeError:
            got = importlib.import_module(module + "." + name)
        ours = importlib.import_module("det_lightning" + module[len("determined"):])
        try:
            expected = getattr(ours, name)
        except AttributeError:
            expected = importlib.import_module(ours.__name__ + "." + name)
        if got is not expected:
            bad.append(("not the same object", module, name))
for full, why in refused.items():
    module, _, name = full.rpartition(".")
    try:
        parent = importlib.import_module(module)
        getattr(parent, name, None) or importlib.import_module(full)
        bad.append(("no error", full))
    except ImportError as e:
        if why not in str(e):
            bad.append(("message", full, str(e)))
    # the other spelling: `from determined.X import name`
    try:
        exec(f"from {module} import {name}")
        bad.append(("no error (from-import)", full))
    except ImportError as e:
        if why not in str(e):
            bad.append(("message (from-import)", full, str(e)))
print(json.dumps(bad))
"""


def test_every_name_through_the_determined_alias() -> None:
    """``import determined`` resolving to det_lightning: provided names are det_lightning's own
    objects, refused ones fail with the reason, both as attributes and as ``from`` imports."""
    provided = {m: sorted(PROVIDED[m] | PROVIDED_PRIVATE.get(m, set())) for m in MODULES}
    refused = {
        name: why for name, why in _refused.REFUSED.items() if name.rpartition(".")[0] in PROVIDED
    }
    result = subprocess.run(
        [sys.executable, "-c", _THROUGH_ALIAS, json.dumps(provided), json.dumps(refused)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_every_refused_name_belongs_to_a_walked_module() -> None:
    """A refusal of a name in a module the inventory does not walk would never be checked."""
    for name in _refused.REFUSED:
        assert name.rpartition(".")[0] in PROVIDED, name


def test_private_simple_reducer_is_determineds() -> None:
    """Trials subclass ``pytorch._SimpleReducer``; ours reduces as Determined's does."""
    import numpy as np
    from determined import pytorch as det_pytorch

    def run(api: object) -> object:
        reducer = api._SimpleReducer(lambda values: float(np.max(values)))  # type: ignore
        reducer.reset()
        for value in (3.0, 7.5, 1.0):
            reducer.update(value)
        per_slot = reducer.per_slot_reduce()
        return per_slot, reducer.cross_slot_reduce([per_slot, [9.0]])

    assert run(det_lightning.pytorch) == run(det_pytorch)
    assert issubclass(det_lightning.pytorch._SimpleReducer, det_lightning.pytorch.MetricReducer)
