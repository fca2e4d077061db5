"""Deterministic mode (``init(deterministic=True)``, ``reproducibility.deterministic``,
``$DET_LIGHTNING_DETERMINISTIC``): torch's flags are set before the trial's ``__init__`` builds
anything, and before CUDA starts. Bit identity on a GPU is ``tests/gpu/test_deterministic.py``.
"""

from typing import Any, Dict, Iterator, List

import pytest
import torch

from det_lightning import pytorch
from det_lightning.pytorch._determinism import CUBLAS_ENV, apply_deterministic, deterministic_flags
from tests.fixtures.run import run_trial
from tests.fixtures.trials import make_trials

TRIALS = make_trials(pytorch)
HPARAMS = {"lr": 0.01, "dropout": 0.3, "shuffle": True}
ON = {
    "deterministic_algorithms": True,
    "cudnn_benchmark": False,
    "cudnn_deterministic": True,
    "cublas_workspace_config": ":4096:8",
}


@pytest.fixture(autouse=True)
def _restore_torch_flags(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Deterministic mode changes process-wide settings: put them back after each test."""
    monkeypatch.delenv(CUBLAS_ENV, raising=False)
    monkeypatch.delenv("DET_LIGHTNING_DETERMINISTIC", raising=False)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
    )
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[1:]


class Probe(TRIALS["MLPTrial"]):  # type: ignore[misc, valid-type]
    """Records the flags as the trial's ``__init__`` sees them, before it builds its model."""

    def __init__(self, context: Any) -> None:
        self.seen_in_init: Dict[str, Any] = {
            **deterministic_flags(),
            "cuda_initialized": torch.cuda.is_initialized(),
        }
        super().__init__(context)


def _fit(**init_kwargs: Any) -> Any:
    with pytorch.init(hparams=HPARAMS, **init_kwargs) as context:
        trial = Probe(context)
        pytorch.Trainer(trial, context, logger=False).fit(
            max_length=pytorch.Batch(4), checkpoint_policy="none"
        )
    return trial


@pytest.mark.parametrize(
    "how",
    [{"deterministic": True}, {"exp_conf": {"reproducibility": {"deterministic": True}}}],
)
def test_the_flags_are_set_before_the_trial_builds_its_model(how: Dict[str, Any]) -> None:
    trial = _fit(**how)
    assert trial.seen_in_init == {**ON, "cuda_initialized": False}
    assert deterministic_flags() == ON  # and still after fit() built Lightning's Trainer


def test_det_lightning_run_deterministic_reaches_init(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LIGHTNING_DETERMINISTIC", "1")  # what `run --deterministic` sets
    assert _fit().seen_in_init["deterministic_algorithms"] is True


def test_off_by_default_and_when_the_argument_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _fit().seen_in_init["deterministic_algorithms"] is False
    monkeypatch.setenv("DET_LIGHTNING_DETERMINISTIC", "1")
    trial = _fit(deterministic=False)  # the argument wins over the environment
    assert trial.seen_in_init["deterministic_algorithms"] is False
    assert trial.seen_in_init["cublas_workspace_config"] is None


def test_a_cublas_setting_of_the_users_is_kept_or_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {CUBLAS_ENV: ":16:8"}
    apply_deterministic(environ)
    assert environ == {CUBLAS_ENV: ":16:8"}
    with pytest.raises(ValueError, match="unset it or set it to :4096:8"):
        apply_deterministic({CUBLAS_ENV: ":0:0"})
    with pytest.raises(ValueError, match="expected true or false"):
        _fit(exp_conf={"reproducibility": {"deterministic": "yes"}})


def test_two_deterministic_runs_train_the_same_weights() -> None:
    runs: List[Any] = [
        run_trial(
            pytorch,
            "MLPTrial",
            HPARAMS,
            init_kwargs={"deterministic": True},
            trainer_kwargs={"logger": False},
            max_length=pytorch.Batch(6),
            checkpoint_policy="none",
        )[0]
        for _ in range(2)
    ]
    assert runs[0].seen == runs[1].seen
    for a, b in zip(runs[0].model.parameters(), runs[1].model.parameters()):
        assert torch.equal(a, b)
