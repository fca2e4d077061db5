"""More of Determined 0.38.1's own trial tests (``harness/tests/experiment/pytorch/
test_pytorch_trial.py``) run on its unmodified fixtures through both: ``test_mode``, epochs that do not divide into the periods (``test_epoch_sync``), irregular
periods (``test_variable_workload_size``), and the misuses it rejects (a reducer's return value;
its torch DataLoader, which needs a trial seed that local training does not set)."""

import pathlib
from typing import Any, Dict

import pytest
from determined import pytorch as det_pytorch

from det_lightning import pytorch as dl_pytorch
from tests.compat.test_fixture_parity import ONEVAR, _assert_close, _fit, _load, _report, _units

pytestmark = pytest.mark.interop

CASES = {
    "test_mode": (
        "pytorch_onevar_model.py",
        "OneVarTrial",
        ONEVAR,
        {"max_length": ("Batch", 20), "validation_period": ("Batch", 8), "test_mode": True},
    ),
    "epoch_sync": (
        "pytorch_no_op/model_def.py",
        "NoopPyTorchTrial",
        {"global_batch_size": 4, "dataset_len": 30},
        {
            "max_length": ("Epoch", 3),
            "validation_period": ("Epoch", 1),
            "checkpoint_period": ("Batch", 5),
        },
    ),
    "variable_workload_size": (
        "pytorch_onevar_model.py",
        "OneVarTrialWithMultiValidation",
        ONEVAR,
        {
            "max_length": ("Batch", 23),
            "validation_period": ("Batch", 7),
            "reporting_period": ("Batch", 3),
        },
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_trial_reports_the_same(name: str, tmp_path: pathlib.Path) -> None:
    module_path, class_name, hparams, spec = CASES[name]
    theirs_module, ours_module = _load(module_path, ours=False), _load(module_path, ours=True)
    theirs = _fit(
        det_pytorch,
        getattr(theirs_module, class_name),
        hparams,
        {"checkpoint_policy": "none", **_units(det_pytorch, spec)},
        tmp_path,
    )
    ours = _fit(
        dl_pytorch,
        getattr(ours_module, class_name),
        hparams,
        {"checkpoint_policy": "none", **_units(dl_pytorch, spec)},
        tmp_path,
    )
    expected, got = _report(theirs), _report(ours)
    assert sorted(got) == sorted(expected)
    for key in expected:
        _assert_close(got[key], expected[key], key)


def _misuse(api: Any, case: str, hparams: Dict[str, Any], tmp: pathlib.Path) -> BaseException:
    module = _load("pytorch_onevar_model.py", ours=api is dl_pytorch)

    class Misused(module.OneVarTrial):  # type: ignore[misc, name-defined]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            if case == "unnamed_reducer_returns_a_scalar":
                context.wrap_reducer(lambda _: 1.0)
            elif case == "named_reducer_returns_a_dict":
                context.wrap_reducer(lambda _: {"my_metric": 1.0}, name="my_metric")

    with pytest.raises(Exception) as info:
        _fit(
            api,
            Misused,
            hparams,
            {
                "max_length": api.Batch(12),
                "validation_period": api.Batch(10),
                "checkpoint_policy": "none",
            },
            tmp,
        )
    return info.value


# case: (hyperparameters, what Determined's error says, what ours says). Determined asserts
# on the reducers (AssertionError); ours raise TypeError (docs/differences.md: errors name the fix).
MISUSES = {
    "unnamed_reducer_returns_a_scalar": (
        ONEVAR,
        "name=None but it did not return a dict",
        "name=None but it returned a float",
    ),
    "named_reducer_returns_a_dict": (
        ONEVAR,
        "with name set but it returned a dict anyway",
        "name='my_metric' but it returned",
    ),
    # Its torch DataLoader asks for the trial seed, which local training does not set.
    "torch_dataloader_needs_a_trial_seed": (
        {**ONEVAR, "dataloader_type": "torch", "disable_dataset_reproducibility_checks": True},
        "Trial seed not set",
        "Trial seed not set",
    ),
}


@pytest.mark.parametrize("case", sorted(MISUSES))
def test_fixture_misuse_is_refused_like_determined(case: str, tmp_path: pathlib.Path) -> None:
    hparams, theirs_says, ours_says = MISUSES[case]
    theirs = _misuse(det_pytorch, case, hparams, tmp_path)
    ours = _misuse(dl_pytorch, case, hparams, tmp_path)
    assert theirs_says in str(theirs), repr(theirs)
    assert ours_says in str(ours), repr(ours)
    if isinstance(theirs, AssertionError):
        assert isinstance(ours, TypeError), repr(ours)
    else:
        assert type(ours).__name__ == type(theirs).__name__, (repr(ours), repr(theirs))


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")
def test_profiling_leaves_the_numbers_alone(isolated_run: pathlib.Path) -> None:
    """``test_pytorch_trial``'s profiler cases: ``context.set_profiler(...)`` (torch's profiler,
    stepped per batch) and ``fit(profiling_enabled=True)`` change no loss, validation or draw."""
    import torch

    from tests.fixtures.trials import make_trials, seed_everything

    results = []
    for api in (det_pytorch, dl_pytorch):
        base = make_trials(api)["MLPTrial"]

        class Profiled(base):  # type: ignore[misc, valid-type]
            def __init__(self, context: Any) -> None:
                super().__init__(context)
                context.set_profiler(
                    activities=[torch.profiler.ProfilerActivity.CPU],
                    schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                )

        seed_everything(5)
        with api.init(hparams={"dropout": 0.3}) as context:
            trial = Profiled(context)
            api.Trainer(trial, context).fit(
                max_length=api.Batch(10),
                validation_period=api.Batch(4),
                profiling_enabled=True,
                checkpoint_policy="none",
            )
        results.append(
            (trial.recorder.batch_losses, trial.recorder.validations, torch.rand(2).tolist())
        )
    assert results[0][0] and results[0][1]
    assert results[1] == results[0]
