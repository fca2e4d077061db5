"""Determined 0.38.1's own test trials (``tests/experiment/fixtures``, unmodified) run through the
real Determined and through det_lightning, seeded the same: every metric they report, every
callback count and the final weights agree.

The fixture files ``import determined``; for det_lightning they are loaded with ``determined``
(and its submodules) resolved to det_lightning, as ``compat.install()`` does, in a module object of
their own, so both copies live in one process beside the real package.
"""

import contextlib
import importlib.util
import pathlib
import sys
import types
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest
import torch
from determined import pytorch as det_pytorch

import det_lightning
from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import seed_everything

pytestmark = pytest.mark.interop

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "experiment" / "fixtures"


@contextlib.contextmanager
def _determined_is(ours: bool) -> Iterator[None]:
    """``import determined`` gives det_lightning (``ours``) or the real package, for the code
    imported inside; the fixtures' own modules are imported afresh either way."""
    prefixes = ("determined.", "tests.experiment")

    def ours_to_swap(name: str) -> bool:
        return name == "determined" or name.startswith(prefixes)

    saved = {k: v for k, v in sys.modules.items() if ours_to_swap(k)}
    for name in saved:
        if name.startswith("tests.experiment") or ours:
            del sys.modules[name]
    if ours:
        import det_lightning.pytorch.samplers  # noqa: F401

        for name, module in list(sys.modules.items()):
            if name == "det_lightning" or name.startswith("det_lightning."):
                sys.modules["determined" + name[len("det_lightning") :]] = module
    try:
        yield
    finally:
        for name in [k for k in sys.modules if ours_to_swap(k)]:
            del sys.modules[name]
        sys.modules.update(saved)


def _load(relative: str, ours: bool) -> types.ModuleType:
    path = FIXTURES / relative
    name = "tests.experiment.fixtures." + relative[:-3].replace("/", ".")
    with _determined_is(ours):
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def _plain(value: Any) -> Any:
    """Metric values as comparable Python data (tensors and arrays as nested lists)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _assert_close(ours: Any, theirs: Any, where: str) -> None:
    ours, theirs = _plain(ours), _plain(theirs)
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs), where
        for key in theirs:
            _assert_close(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (where, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _assert_close(a, b, f"{where}[{i}]")
    elif isinstance(theirs, float) and np.isnan(theirs):
        assert isinstance(ours, float) and np.isnan(ours), (where, ours, theirs)
    elif isinstance(theirs, float):
        assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7), (where, ours, theirs)
    else:
        assert ours == theirs, (where, ours, theirs)


def _fit(
    api: Any,
    trial_class: Any,
    hparams: Dict[str, Any],
    fit_kwargs: Dict[str, Any],
    tmp: pathlib.Path,
) -> Any:
    seed_everything(21)
    with api.init(hparams=hparams, enable_tensorboard_logging=False) as context:
        trial = trial_class(context)
        kwargs: Dict[str, Any] = {}
        if api is dl_pytorch:
            kwargs = {"checkpoint_dir": str(tmp / "ours"), "logger": False}
        api.Trainer(trial, context, **kwargs).fit(**fit_kwargs)
    return trial


ONEVAR = {"global_batch_size": 4, "dataloader_type": "determined", "learning_rate": 0.01}

# (module, trial class, hyperparameters, fit() arguments (units by name), what to compare)
CASES: List[Tuple[str, str, Dict[str, Any], Dict[str, Any]]] = [
    (
        "pytorch_onevar_model.py",
        "OneVarTrial",
        ONEVAR,
        {"max_length": ("Batch", 20), "validation_period": ("Batch", 8)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialWithMultiValidation",
        ONEVAR,
        {"max_length": ("Epoch", 2), "validation_period": ("Batch", 10)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialPerMetricReducers",
        ONEVAR,
        {"max_length": ("Batch", 12), "validation_period": ("Batch", 5)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialWithTrainingMetrics",
        ONEVAR,
        {"max_length": ("Batch", 12), "reporting_period": ("Batch", 5)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialCustomEval",
        ONEVAR,
        {"max_length": ("Batch", 10), "validation_period": ("Batch", 4)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialGradClipping",
        {**ONEVAR, "gradient_clipping_l2_norm": 0.0001},
        {"max_length": ("Batch", 8)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialGradClipping",
        {**ONEVAR, "gradient_clipping_value": 0.0001},
        {"max_length": ("Batch", 8)},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialWithNonScalarValidation",
        ONEVAR,
        {"max_length": ("Batch", 8), "validation_period": ("Batch", 4)},
    ),
    *[
        (
            "pytorch_onevar_model.py",
            "OneVarTrialWithLRScheduler",
            {**ONEVAR, "lr_scheduler_step_mode": mode},
            {"max_length": ("Epoch", 2), "validation_period": ("Batch", 6)},
        )
        for mode in (1, 2, 3, 4)
    ],  # StepMode values, as Determined's tests pass them
    (
        "pytorch_onevar_model.py",
        "OneVarTrialAccessContext",
        {**ONEVAR, "lr_scheduler_step_mode": 2},  # its BCE loss leaves [0, 1] after one step
        {"max_length": ("Batch", 1), "step_zero_validation": True},
    ),
    (
        "pytorch_onevar_model.py",
        "OneVarTrialCallbacks",
        ONEVAR,
        {
            "max_length": ("Epoch", 3),
            "validation_period": ("Epoch", 1),
            "checkpoint_period": ("Batch", 10),
        },
    ),
    (
        "pytorch_identity/model_def.py",
        "IdentityPyTorchTrial",
        {"global_batch_size": 4},
        {"max_length": ("Batch", 16), "validation_period": ("Batch", 4)},
    ),
    (
        "pytorch_no_op/model_def.py",
        "NoopPyTorchTrial",
        {"global_batch_size": 4, "dataset_len": 32},
        {
            "max_length": ("Batch", 12),
            "validation_period": ("Batch", 6),
            "checkpoint_period": ("Batch", 6),
        },
    ),
]


def _units(api: Any, spec: Dict[str, Any]) -> Dict[str, Any]:
    return {
        key: getattr(api, value[0])(value[1]) if isinstance(value, tuple) else value
        for key, value in spec.items()
    }


def _report(trial: Any) -> Dict[str, Any]:
    """Everything a fixture trial records about its run."""
    found: Dict[str, Any] = {}
    metrics = getattr(trial, "metrics_callback", None)
    for name in ("validation_metrics", "training_metrics", "batch_metrics"):
        if metrics is not None and hasattr(metrics, name):
            found[name] = getattr(metrics, name)
    if hasattr(trial, "checkpoint_callback"):
        found["checkpoints"] = len(trial.checkpoint_callback.uuids)
    if hasattr(trial, "counter"):
        found["counter"] = dict(vars(trial.counter))
        found["legacy_epoch_starts"] = trial.legacy_counter.legacy_on_training_epochs_start_calls
    found["weights"] = [p.detach().clone() for m in trial.context.models for p in m.parameters()]
    return found


# OneVarTrialAccessContext steps an LR scheduler whose optimizer never steps; torch says so.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
@pytest.mark.parametrize(
    "module_path, class_name, hparams, fit_spec",
    CASES,
    ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)],
)
def test_determineds_fixture_trial_reports_the_same(
    module_path: str,
    class_name: str,
    hparams: Dict[str, Any],
    fit_spec: Dict[str, Any],
    tmp_path: pathlib.Path,
) -> None:
    theirs_module, ours_module = _load(module_path, ours=False), _load(module_path, ours=True)
    assert ours_module.pytorch is dl_pytorch and theirs_module.pytorch is det_pytorch
    fit_kwargs = {"checkpoint_policy": "none"}
    theirs = _fit(
        det_pytorch,
        getattr(theirs_module, class_name),
        hparams,
        {**fit_kwargs, **_units(det_pytorch, fit_spec)},
        tmp_path,
    )
    ours = _fit(
        dl_pytorch,
        getattr(ours_module, class_name),
        hparams,
        {**fit_kwargs, **_units(dl_pytorch, fit_spec)},
        tmp_path,
    )
    expected, got = _report(theirs), _report(ours)
    assert sorted(got) == sorted(expected)
    for key in expected:
        _assert_close(got[key], expected[key], key)
    _ = det_lightning
