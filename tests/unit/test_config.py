"""Tests for det_lightning._runner.config: experiment-config validation and search expansion."""

import copy
import logging
import math
import pathlib
from typing import Any, Dict, List

import pytest

from det_lightning._runner import config as _config
from det_lightning.errors import InvalidConfigException


def _base() -> Dict[str, Any]:
    """A minimal valid config."""
    return {
        "entrypoint": "model_def:MyTrial",
        "hyperparameters": {"global_batch_size": 32, "lr": 0.1},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 100}},
    }


def _with(**changes: Any) -> Dict[str, Any]:
    """The minimal config with top-level keys replaced (None removes a key)."""
    config = _base()
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def _searcher(**changes: Any) -> Dict[str, Any]:
    """The minimal config with searcher keys replaced."""
    searcher = dict(_base()["searcher"], **changes)
    return _with(searcher=searcher)


def test_valid_const_config_fills_defaults() -> None:
    source = _base()
    before = copy.deepcopy(source)
    cfg = _config.load_config(source)
    assert source == before, "load_config must not modify its input"
    assert cfg.entrypoint == "model_def:MyTrial"
    assert cfg.legacy_trial_class() == "model_def:MyTrial"
    assert cfg.hyperparameters == {"global_batch_size": 32, "lr": 0.1}
    assert cfg.searcher["smaller_is_better"] is True
    assert cfg.raw["optimizations"]["aggregation_frequency"] == 1
    assert cfg.raw["optimizations"]["average_aggregated_gradients"] is True
    assert cfg.raw["checkpoint_policy"] == "best"
    assert cfg.raw["scheduling_unit"] == 100
    assert cfg.raw["perform_initial_validation"] is False
    assert cfg.max_length() == (100, "batches")
    assert cfg.min_validation_period() is None
    assert cfg.min_checkpoint_period() is None
    assert cfg.checkpoint_dir() is None
    assert cfg.resources_config.slots_per_trial == 1
    assert cfg.optimizations_config.aggregation_frequency == 1
    assert cfg.reproducibility_config.experiment_seed is None
    assert cfg.records_per_epoch() is None
    assert cfg.ignored_keys == []
    assert cfg.trial_hparams() == [{"global_batch_size": 32, "lr": 0.1}]


def test_load_from_yaml_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "const.yaml"
    path.write_text(
        "entrypoint: python3 train.py\n"
        "hyperparameters: {global_batch_size: 8}\n"
        "searcher: {name: single, metric: loss, max_length: {epochs: 2}}\n"
        "records_per_epoch: 640\n"
        "min_validation_period: {batches: 50}\n"
        "checkpoint_storage: {type: shared_fs, host_path: /tmp/ckpts, storage_path: exp}\n"
        "reproducibility: {experiment_seed: 7}\n"
        "optimizations: {aggregation_frequency: 4}\n"
        "resources: {slots_per_trial: 2}\n"
    )
    cfg = _config.load_config(path)
    assert cfg.legacy_trial_class() is None
    assert cfg.max_length() == (2, "epochs")
    assert cfg.records_per_epoch() == 640
    assert cfg.min_validation_period() == (50, "batches")
    assert cfg.checkpoint_dir() == "/tmp/ckpts/exp"
    assert cfg.reproducibility_config.experiment_seed == 7
    assert cfg.optimizations_config.aggregation_frequency == 4
    assert cfg.resources_config.slots_per_trial == 2


@pytest.mark.parametrize(
    "config, expected",
    [
        (_searcher(max_length=500), (500, None)),
        (_searcher(max_length={"records": 6400}), (6400, "records")),
        (_searcher(max_length=None), None),
    ],
)
def test_max_length_forms(config: Dict[str, Any], expected: Any) -> None:
    if config["searcher"]["max_length"] is None:
        del config["searcher"]["max_length"]
    assert _config.load_config(config).max_length() == expected


def test_directory_checkpoint_storage() -> None:
    config = _with(checkpoint_storage={"type": "directory", "container_path": "/ckpt"})
    cfg = _config.load_config(config)
    assert cfg.checkpoint_dir() == "/ckpt"
    assert cfg.raw["checkpoint_storage"]["save_trial_best"] == 1


def test_storage_block_of_only_save_counts_keeps_the_default_storage(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Determined's master merges a block without ``type`` with the cluster's default storage;
    here that is the checkpoint directory ($DET_LIGHTNING_CHECKPOINT_DIR, ./checkpoints)."""
    from det_lightning._runner.plan import plan_experiment

    storage = {"save_experiment_best": 2, "save_trial_best": 0}
    cfg = _config.load_config(_with(checkpoint_storage=storage))
    assert cfg.checkpoint_storage == {**storage, "save_trial_latest": 1}
    assert cfg.checkpoint_dir() is None
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", str(tmp_path / "ckpts"))
    plan = plan_experiment(cfg, tmp_path)
    assert str(plan.checkpoint_root).startswith(str(tmp_path / "ckpts"))


def test_storage_block_without_type_sets_only_save_counts() -> None:
    message = _message(_with(checkpoint_storage={"bucket": "b", "save_trial_best": 2}))
    assert "checkpoint_storage.type: required key is missing" in message
    assert "save_trial_latest keeps checkpoints in the checkpoint directory" in message


def _message(config: Any) -> str:
    """The InvalidConfigException message load_config raises for ``config``."""
    with pytest.raises(InvalidConfigException) as info:
        _config.load_config(config)
    assert isinstance(info.value, ValueError)
    return str(info.value)


@pytest.mark.parametrize(
    "config, fragments",
    [
        # Missing required keys.
        (_with(entrypoint=None), ["entrypoint", "required", "model_def:TrialClass"]),
        (_with(searcher=None), ["searcher", "required"]),
        (_searcher(metric=None), ["searcher.metric", "required"]),
        # Lengths in a unit that does not exist.
        (
            _searcher(max_length={"minutes": 5}),
            ["searcher.max_length", "minutes", "batches", "epochs", "records"],
        ),
        (
            _searcher(max_length={"batches": 5, "epochs": 1}),
            ["searcher.max_length", "exactly one"],
        ),
        (_with(min_validation_period={"hours": 1}), ["min_validation_period", "batches"]),
        # Misspelled keys name the path and the closest valid key.
        (_searcher(max_length={"batchs": 5}), ["searcher.max_length.batchs", "'batches'"]),
        (_searcher(smaler_is_better=False), ["searcher.smaler_is_better", "'smaller_is_better'"]),
        (_with(optimisations={}), ["optimisations", "'optimizations'"]),
        (_with(max_length=5), ["max_length", "'searcher.max_length'"]),
        (
            _with(hyperparameters={"lr": {"type": "double", "minvl": 0.1, "maxval": 1.0}}),
            ["hyperparameters.lr.minvl", "'minval'"],
        ),
        (
            _with(hyperparameters={"lr": {"type": "float", "minval": 0.1, "maxval": 1.0}}),
            ["hyperparameters.lr.type", "double"],
        ),
        # Wrong types name the expected type.
        (_searcher(smaller_is_better="yes"), ["searcher.smaller_is_better", "boolean", "'yes'"]),
        (_with(records_per_epoch="many"), ["records_per_epoch", "integer"]),
        (_with(reproducibility={"experiment_seed": -1}), ["experiment_seed", ">= 0"]),
        (_with(optimizations={"aggregation_frequency": 0}), ["aggregation_frequency", ">= 1"]),
        (_with(optimizations={"aggregation_frequency": True}), ["aggregation_frequency", "int"]),
        (_with(labels=["a", 3]), ["labels[1]", "string"]),
        (_with(entrypoint=""), ["entrypoint", "string"]),
        (_with(checkpoint_policy="some"), ["checkpoint_policy", "'best'"]),
        (_with(environment="image"), ["environment", "mapping"]),
        ([1, 2], ["mapping"]),
        # Searchers and hyperparameters.
        (_searcher(name="pbt"), ["searcher.name", "pbt", "single"]),
        (_searcher(name="gird"), ["searcher.name", "'grid'"]),
        (_searcher(name="random"), ["searcher.max_trials", "random"]),
        (
            _with(
                searcher={"name": "grid", "metric": "loss"},
                hyperparameters={"net": {"width": {"type": "int", "minval": 1, "maxval": 8}}},
            ),
            ["hyperparameters.net.width", "count"],
        ),
        (
            _with(hyperparameters={"n": {"type": "int", "minval": 5, "maxval": 1}}),
            ["hyperparameters.n", "minval"],
        ),
        (
            _with(hyperparameters={"c": {"type": "categorical", "vals": []}}),
            ["hyperparameters.c.vals"],
        ),
        (
            _with(checkpoint_storage={"type": "shared_fs"}),
            ["checkpoint_storage.host_path", "required"],
        ),
        (_with(checkpoint_storage={"type": "sharedfs"}), ["checkpoint_storage.type", "shared_fs"]),
    ],
)
def test_invalid_configs_name_the_problem(config: Any, fragments: List[str]) -> None:
    message = _message(config)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_missing_file_is_a_config_error(tmp_path: pathlib.Path) -> None:
    assert "cannot read" in _message(str(tmp_path / "missing.yaml"))


def test_bad_yaml_is_a_config_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("searcher: [unclosed\n")
    assert "not valid YAML" in _message(path)


def test_ignored_keys_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    config = _with(
        environment={"image": "determinedai/pytorch"},
        bind_mounts=[{"host_path": "/data", "container_path": "/data"}],
        resources={"resource_pool": "a100", "slots_per_trial": 2, "priority": 10},
        optimizations={"mixed_precision": "O1", "aggregation_frequency": 2},
        max_restarts=3,
    )
    with caplog.at_level(logging.WARNING, logger="det_lightning"):
        cfg = _config.load_config(config)
    expected = [
        "environment",
        "bind_mounts",
        "resources.resource_pool",
        "resources.priority",
        "optimizations.mixed_precision",
    ]  # max_restarts is honoured (a failing trial's restarts), not ignored
    assert sorted(cfg.ignored_keys) == sorted(expected)
    assert len(set(cfg.ignored_keys)) == len(cfg.ignored_keys)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    for key in expected:
        assert key in warnings[0].getMessage()
    # Ignored keys keep their values in raw; local keys still work.
    assert cfg.raw["environment"] == {"image": "determinedai/pytorch"}
    assert (
        cfg.resources_config.slots_per_trial == 2
        and cfg.optimizations_config.aggregation_frequency == 2
    )


def test_no_warning_without_ignored_keys(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="det_lightning"):
        _config.load_config(_base())
    assert not caplog.records


def test_cloud_checkpoint_storage_is_a_url() -> None:
    config = _with(
        checkpoint_storage={
            "type": "s3",
            "bucket": "b",
            "prefix": "runs/a/",
            "endpoint_url": "http://127.0.0.1:1",
            "save_trial_best": 2,
        }
    )
    cfg = _config.load_config(config)
    assert cfg.ignored_keys == []
    assert cfg.checkpoint_dir() == "s3://b/runs/a"
    gcs = _config.load_config(_with(checkpoint_storage={"type": "gcs", "bucket": "g"}))
    assert gcs.checkpoint_dir() == "gs://g"
    azure = _with(checkpoint_storage={"type": "azure", "container": "c", "prefix": "p"})
    assert _config.load_config(azure).checkpoint_dir() == "az://c/p"


def test_cloud_checkpoint_storage_keys_are_checked() -> None:
    with pytest.raises(InvalidConfigException, match="bucket"):
        _config.load_config(_with(checkpoint_storage={"type": "s3", "prefix": "p"}))
    with pytest.raises(InvalidConfigException, match="endpoint"):
        _config.load_config(
            _with(checkpoint_storage={"type": "s3", "bucket": "b", "endpont_url": "http://x"})
        )


def test_grid_two_by_two() -> None:
    hparams = {
        "global_batch_size": 16,
        "lr": {"type": "categorical", "vals": [0.1, 0.01]},
        "layers": {"type": "int", "minval": 1, "maxval": 4, "count": 2},
    }
    points = _config.grid_points(hparams)
    # Determined walks the hyperparameters in name order (expconf HyperparametersV0.Each sorts
    # them), so "layers" comes before "lr" and varies slowest.
    assert points == [
        {"global_batch_size": 16, "layers": 1, "lr": 0.1},
        {"global_batch_size": 16, "layers": 1, "lr": 0.01},
        {"global_batch_size": 16, "layers": 4, "lr": 0.1},
        {"global_batch_size": 16, "layers": 4, "lr": 0.01},
    ]
    assert [list(p) for p in points] == [["global_batch_size", "layers", "lr"]] * 4


@pytest.mark.parametrize(
    "spec, values",
    [
        ({"type": "int", "minval": 0, "maxval": 10, "count": 3}, [0, 5, 10]),
        ({"type": "int", "minval": 0, "maxval": 3, "count": 3}, [0, 2, 3]),  # 1.5 rounds up
        ({"type": "int", "minval": 0, "maxval": 2, "count": 100}, [0, 1, 2]),  # clamped
        ({"type": "int", "minval": 1, "maxval": 4, "count": 1}, [3]),  # midpoint 2.5 -> 3
        ({"type": "double", "minval": 0.0, "maxval": 1.0, "count": 5}, [0, 0.25, 0.5, 0.75, 1]),
        ({"type": "double", "minval": 0.0, "maxval": 1.0, "count": 1}, [0.5]),
        ({"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3}, [1e-3, 1e-2, 1e-1]),
        ({"type": "const", "val": [1, 2]}, [[1, 2]]),
        ({"type": "categorical", "vals": ["a", "b", "c"]}, ["a", "b", "c"]),
        ("sgd", ["sgd"]),
    ],
)
def test_grid_axis_values(spec: Any, values: List[Any]) -> None:
    points = _config.grid_points({"x": spec})
    got = [p["x"] for p in points]
    assert len(got) == len(values)
    for a, b in zip(got, values):
        assert a == pytest.approx(b) if isinstance(b, float) else a == b


def test_grid_nested_hyperparameters() -> None:
    hparams = {"opt": {"name": "adam", "lr": {"type": "categorical", "vals": [1, 2]}}, "k": 3}
    assert _config.grid_points(hparams) == [
        {"opt": {"name": "adam", "lr": 1}, "k": 3},
        {"opt": {"name": "adam", "lr": 2}, "k": 3},
    ]


def test_grid_without_count_names_the_key() -> None:
    hparams = {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}}
    with pytest.raises(InvalidConfigException, match=r"hyperparameters\.lr.*count"):
        _config.grid_points(hparams)


def test_grid_without_hyperparameters_is_one_trial() -> None:
    assert _config.grid_points({}) == [{}]


_RANDOM_SPACE = {
    "global_batch_size": 32,
    "units": {"type": "int", "minval": 8, "maxval": 64},
    "dropout": {"type": "double", "minval": 0.1, "maxval": 0.5},
    "lr": {"type": "log", "minval": -5, "maxval": -2, "base": 10},
    "act": {"type": "categorical", "vals": ["relu", "gelu", "tanh"]},
    "opt": {"momentum": {"type": "double", "minval": 0.8, "maxval": 0.99}},
}


def test_random_points_deterministic_per_seed() -> None:
    first = _config.random_points(_RANDOM_SPACE, 6, seed=3)
    assert first == _config.random_points(_RANDOM_SPACE, 6, seed=3)
    assert first != _config.random_points(_RANDOM_SPACE, 6, seed=4)
    assert len(first) == 6


def test_random_points_within_bounds() -> None:
    for point in _config.random_points(_RANDOM_SPACE, 200, seed=0):
        assert point["global_batch_size"] == 32
        assert isinstance(point["units"], int) and 8 <= point["units"] <= 64
        assert 0.1 <= point["dropout"] <= 0.5
        assert 10**-5 <= point["lr"] <= 10**-2
        assert point["act"] in ("relu", "gelu", "tanh")
        assert 0.8 <= point["opt"]["momentum"] <= 0.99


@pytest.mark.parametrize("base, minval, maxval", [(10, -4, -1), (2, 1, 6), (math.e, -2.5, 0.5)])
def test_log_points_within_base_powers(base: float, minval: float, maxval: float) -> None:
    spec = {"lr": {"type": "log", "minval": minval, "maxval": maxval, "base": base}}
    low, high = base**minval, base**maxval
    for point in _config.random_points(spec, 100, seed=1):
        assert low * (1 - 1e-12) <= point["lr"] <= high * (1 + 1e-12)
    spec["lr"]["count"] = 4
    grid = [p["lr"] for p in _config.grid_points(spec)]
    assert grid[0] == pytest.approx(low) and grid[-1] == pytest.approx(high)


@pytest.mark.parametrize("max_trials", [0, -1, 1.5])
def test_random_points_rejects_bad_trial_counts(max_trials: Any) -> None:
    with pytest.raises(InvalidConfigException, match="max_trials"):
        _config.random_points(_RANDOM_SPACE, max_trials, seed=0)


def test_trial_hparams_per_searcher() -> None:
    space = {"lr": {"type": "categorical", "vals": [1, 2, 3]}}
    grid_config = _with(hyperparameters=space, searcher={"name": "grid", "metric": "m"})
    grid = _config.load_config(grid_config)
    assert grid.trial_hparams() == [{"lr": 1}, {"lr": 2}, {"lr": 3}]
    seeded = _with(
        hyperparameters=space,
        searcher={"name": "random", "metric": "m", "max_trials": 5},
        reproducibility={"experiment_seed": 11},
    )
    rand = _config.load_config(seeded)
    assert rand.trial_hparams() == _config.random_points(space, 5, seed=11)
    asha = _searcher(name="adaptive_asha", max_trials=4)
    with pytest.raises(InvalidConfigException, match="adaptive_asha"):
        _config.load_config(asha).trial_hparams()


def test_an_unnamed_experiment_is_named_as_determined_names_it() -> None:
    """``description`` and no ``name``: Determined's master names it "Experiment (a-b-c)" and
    keeps the description apart; a given name stays as it is."""
    import re

    base = {
        "entrypoint": "model_def:Trial",
        "description": "my mnist run",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}},
    }
    load_config = _config.load_config
    first, second = load_config(dict(base)), load_config(dict(base))
    assert re.fullmatch(r"Experiment \([a-z]+-[a-z]+-[a-z]+\)", first.raw["name"])
    assert first.raw["description"] == "my mnist run"
    assert load_config({**base, "name": "mine"}).raw["name"] == "mine"
    names = {load_config(dict(base)).raw["name"] for _ in range(5)} | {second.raw["name"]}
    assert len(names) > 1  # random words tell experiments apart


def test_a_random_int_includes_both_ends() -> None:
    """Determined draws ``int`` hyperparameters from [minval, maxval] (since 0.17)."""
    space = {"n": {"type": "int", "minval": 1, "maxval": 3}}
    drawn = {p["n"] for p in _config.random_points(space, 200, seed=5)}
    assert drawn == {1, 2, 3}


@pytest.mark.parametrize(
    "config,path,replacement",
    [
        (_with(batches_per_step=100), "batches_per_step", "scheduling_unit"),
        (_searcher(max_steps=10, max_length=None), "searcher.max_steps", "searcher.max_length"),
        (
            _with(min_validation_period={"steps": 5}),
            "min_validation_period.steps",
            "{batches: STEPS * batches_per_step}",
        ),
        (
            _searcher(name="adaptive_asha", target_trial_steps=10),
            "searcher.target_trial_steps",
            "searcher.max_length",
        ),
    ],
)
def test_pre_012_keys_say_what_replaced_them(config: Any, path: str, replacement: str) -> None:
    """Determined 0.38.1's schema (schemas/expconf/v0) has none of these keys either; instead of
    "unknown key", the message says the config predates 0.12 and what to write now."""
    message = _message(config)
    assert message.startswith(f"{path}: ")
    assert "before 0.12" in message and replacement in message and "unknown key" not in message
    assert "wrap_model" in message  # the trial of that era needs the newer API too


_REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "config",
    [
        *sorted(str(p.relative_to(_REPO)) for p in _REPO.glob("examples/**/*.yaml")),
        *sorted(str(p.relative_to(_REPO)) for p in _REPO.glob("tests/fixtures/**/*.yaml")),
        "time_metric",
        "unnamed",
    ],
)
def test_a_config_read_back_from_its_record_is_the_same(config: str) -> None:
    """``experiment.json`` keeps the config with its defaults filled in (``max_length: null``
    where a search gives ``time_metric``/``max_time``); ``experiment list`` and ``describe``
    load it again, which must give the same config, not an error (it once raised
    "searcher.max_length: expected integer or mapping, got null")."""
    import yaml

    if config == "time_metric":
        raw = _searcher(
            name="adaptive_asha", max_trials=4, max_length=None, time_metric="batches", max_time=8
        )
        del raw["searcher"]["max_length"]
    elif config == "unnamed":
        raw = _base()
    else:
        raw = yaml.safe_load((_REPO / config).read_text())
    first = _config.load_config(raw)
    again = _config.load_config(copy.deepcopy(first.as_given))
    assert again.as_given == first.as_given
    assert again.lengths == first.lengths
