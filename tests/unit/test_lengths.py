"""The experiment config's lengths and periods, parsed once (``pytorch/_lengths.py``)."""

import doctest
import sys
from typing import Any, Dict, Optional

import pytest

from det_lightning import errors
from det_lightning._env import TRIAL_INFO_ENV
from det_lightning._info import ClusterInfo, TrialInfo
from det_lightning._runner.config import Length, Lengths, load_config
from det_lightning.pytorch import Batch, Epoch, TrainUnit, _lengths
from det_lightning.pytorch._trainer import searcher_length

NEVER = Batch(sys.maxsize)


@pytest.mark.parametrize(
    "written, global_batch_size, expected",
    [
        ({"batches": 5}, None, Batch(5)),
        ({"epochs": 2}, None, Epoch(2)),  # an epoch is one pass of the training loader
        ({"records": 100}, 8, Batch(12)),  # 100 // 8
        ({"records": 100}, 32, Batch(3)),
        ({"records": 10}, 32, Batch(1)),  # at least one batch
        ({"batches": 0}, None, NEVER),  # a period of 0: never
        ({"epochs": 0}, None, NEVER),
        ({"records": 0}, None, NEVER),  # never needs no batch size
    ],
)
def test_a_length_in_each_unit_becomes_a_train_unit(
    written: Dict[str, int], global_batch_size: Optional[int], expected: TrainUnit
) -> None:
    length = Length.parse("min_validation_period", written)
    assert length is not None
    assert length.train_unit(global_batch_size) == expected


@pytest.mark.parametrize("global_batch_size", [None, 0, -8, True, 8.0, "8"])
def test_records_need_an_integer_global_batch_size(global_batch_size: Any) -> None:
    length = Length("searcher.max_length", 64, "records")
    with pytest.raises(
        errors.InvalidConfigException,
        match=r"^searcher.max_length.records: converting records to batches needs "
        r"an integer hyperparameters.global_batch_size >= 1",
    ):
        length.train_unit(global_batch_size)


def _config(**keys: Any) -> Dict[str, Any]:
    searcher = {"name": "single", "metric": "loss", **keys.pop("searcher", {})}
    return {"entrypoint": "model_def:Trial", "searcher": searcher, **keys}


@pytest.mark.parametrize(
    "config, hparams, expected",
    [
        (
            _config(searcher={"max_length": {"batches": 10}}),
            {},
            {
                "max_length": Batch(10),
                "validation_period": NEVER,
                "checkpoint_period": NEVER,
                "reporting_period": Batch(100),
            },
        ),
        (
            _config(
                searcher={"max_length": {"records": 100}},
                min_validation_period={"epochs": 2},
                min_checkpoint_period={"records": 40},
                scheduling_unit=7,
            ),
            {"global_batch_size": 8},
            {
                "max_length": Batch(12),
                "validation_period": Epoch(2),
                "checkpoint_period": Batch(5),
                "reporting_period": Batch(7),
            },
        ),
        (
            _config(searcher={"max_length": {"epochs": 3}}, min_checkpoint_period={"batches": 4}),
            {},
            {
                "max_length": Epoch(3),
                "validation_period": NEVER,
                "checkpoint_period": Batch(4),
                "reporting_period": Batch(100),
            },
        ),
    ],
)
def test_fit_lengths_as_the_harness_passes_them(
    config: Dict[str, Any], hparams: Dict[str, Any], expected: Dict[str, TrainUnit]
) -> None:
    assert load_config(config).lengths.fit_lengths(hparams) == expected


@pytest.mark.parametrize(
    "searcher, message",
    [
        ({}, "^searcher.max_length: required key is missing"),
        ({"max_length": 4}, "^searcher.max_length: 4 has no unit"),
        ({"max_length": {"records": 64}}, "global_batch_size >= 1, got None"),
    ],
)
def test_fit_lengths_name_what_is_missing(searcher: Dict[str, Any], message: str) -> None:
    lengths = load_config(_config(searcher=searcher)).lengths
    with pytest.raises(errors.InvalidConfigException, match=message):
        lengths.fit_lengths({})


def test_the_config_reads_its_lengths_through_the_one_object() -> None:
    config = load_config(
        _config(
            searcher={"max_length": 4}, records_per_epoch=640, min_validation_period={"batches": 50}
        )
    )
    assert config.lengths.max_length == Length("searcher.max_length", 4, None)
    assert config.max_length() == (4, None)
    assert config.lengths.records_per_epoch == config.records_per_epoch() == 640
    assert config.min_validation_period() == (50, "batches")
    assert config.min_checkpoint_period() is None  # 0: never
    unset = load_config(_config())
    assert unset.lengths.max_length is None and unset.lengths.records_per_epoch is None


@pytest.mark.parametrize(
    "searcher, hparams, expected",
    [
        ({"time_metric": "batches", "max_time": 8, "max_length": {"epochs": 2}}, {}, Batch(8)),
        ({"time_metric": "epochs", "max_time": 3}, {}, Epoch(3)),
        ({"max_length": {"epochs": 2}}, {}, Epoch(2)),
        ({"max_length": {"records": 64}}, {"global_batch_size": 8}, Batch(8)),
        ({"max_length": 4}, {}, None),  # no unit: fit() must be given its length
        ({}, {}, None),
    ],
)
def test_the_searcher_length_of_a_search_trial(
    searcher: Dict[str, Any], hparams: Dict[str, Any], expected: Optional[TrainUnit]
) -> None:
    assert Lengths.from_config({"searcher": searcher}).searcher_length(hparams) == expected


def test_a_searcher_length_in_records_without_a_batch_size_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behaviour change: fit() without max_length in a search's trial used one record per batch
    when ``global_batch_size`` was missing; the real Determined 0.38.1 raises ("global_batch_size
    required for searcher unit Records."), and so does the config's one reading now."""
    config = {"searcher": {"max_length": {"records": 64}}}
    info = ClusterInfo(TrialInfo(1, 0, {"lr": 0.1}, config))
    monkeypatch.setenv(TRIAL_INFO_ENV, info.to_environment())
    with pytest.raises(errors.InvalidConfigException, match="global_batch_size >= 1, got None"):
        searcher_length()
    with_size = ClusterInfo(TrialInfo(1, 0, {"global_batch_size": 16}, config))
    monkeypatch.setenv(TRIAL_INFO_ENV, with_size.to_environment())
    assert searcher_length() == Batch(4)


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(_lengths).failed == 0
