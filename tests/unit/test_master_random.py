"""Each trial's hyperparameters and seed, drawn as Determined's master draws them from the
experiment seed (``_runner/config/_master_random.py``, ``created_trials``), and what a search
records and hands its trials.

The expected numbers are Determined's, not ours: its generator's tests
(``master/pkg/nprand/nprand_test.go``, NumPy's legacy generator) and its master's own
records of five experiments (``master/test/olddata/pre_remove_steps.sql``, 0.38.1's tree:
each experiment's config with its ``experiment_seed``, and each trial's ``seed`` column and
``request_id``, in the order the master created them).
"""

import uuid
from typing import Any, Dict, List

import optuna
import pytest

from det_lightning import errors
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner.config import created_trials, load_config, random_points
from det_lightning._runner.config._master_random import MasterRandom
from det_lightning._runner.search import _worker
from det_lightning._runner.search._grid import enqueue_grid
from det_lightning._runner.search._sample import suggest
from det_lightning.pytorch._config_sections import ReproducibilityConfig

# The master's records: experiment seed -> the seeds of the trials it created, in order.
# Every experiment there has constant hyperparameters (learning_rate, global_batch_size).
MASTER_TRIAL_SEEDS = {
    1673293390: [1690718313],  # experiment 1, single: trial 1
    1673293395: [  # experiment 2, adaptive_simple, 10 trials: trials 2..11
        1224683633,
        1486927260,
        1093608047,
        610763466,
        1336445662,
        1675539733,
        294595244,
        1000927527,
        1718236650,
        1152054472,
    ],
    1673293513: [2104061185, 1660207990],  # experiment 3, pbt: its first two, trials 12, 13
    1673293568: [577236147],  # experiment 4, pbt: trial 16
    1673293593: [556896495],  # experiment 5, single: trial 17
}
MASTER_REQUEST_IDS = {
    1673293568: "5f903ff9-b5b1-4b18-a8a2-1deae1d12746",  # trial 16
    1673293593: "51477d19-6335-49db-840b-124d8ac1ed5a",  # trial 17
}
CONSTANT_SPACE = {"learning_rate": 0.01, "global_batch_size": 4}


def test_the_generator_is_the_masters() -> None:
    """nprand_test.go's vectors: ``Intn(10)`` from seed 42, ``Int64n(1 << 31)`` from 999,
    ``Int64n(1 << 60 - 10)`` (64-bit draws) from 999, ``Uniform(0, 1)`` from 1."""
    rng = MasterRandom(42)
    assert [rng.below(10) for _ in range(24)] == [
        6, 3, 7, 4, 6, 9, 2, 6, 7, 4, 3, 7, 7, 2, 5, 4, 1, 7, 5, 1, 4, 0, 9, 5,
    ]  # fmt: skip
    rng = MasterRandom(999)
    assert [rng.below(1 << 31) for _ in range(6)] == [
        1303213504, 648491356, 118207333, 2129740257, 511579848, 922722529,
    ]  # fmt: skip
    rng = MasterRandom(999)
    assert [rng.below((1 << 60) - 10) for _ in range(2)] == [
        985573361606668636, 507696633659605473,
    ]  # fmt: skip
    rng = MasterRandom(1)
    assert [rng.uniform(0, 1) for _ in range(3)] == [
        0.417022004702574, 0.7203244934421581, 0.00011437481734488664,
    ]  # fmt: skip


@pytest.mark.parametrize("seed", sorted(MASTER_TRIAL_SEEDS))
def test_trial_seeds_are_the_ones_the_master_gave(seed: int) -> None:
    expected = MASTER_TRIAL_SEEDS[seed]
    made = created_trials(CONSTANT_SPACE, len(expected), seed)
    assert [t.trial_seed for t in made] == expected
    assert all(t.hparams == CONSTANT_SPACE and t.params == {} for t in made)


@pytest.mark.parametrize("seed", sorted(MASTER_REQUEST_IDS))
def test_the_request_id_is_drawn_between_the_point_and_the_seed(seed: int) -> None:
    rng = MasterRandom(seed)
    assert rng.request_id() == MASTER_REQUEST_IDS[seed]
    assert rng.trial_seed() == MASTER_TRIAL_SEEDS[seed][0]
    assert uuid.UUID(MASTER_REQUEST_IDS[seed]).version == 4


def test_points_are_drawn_in_name_order_with_the_masters_rules() -> None:
    """sampleAll: names sorted (nested ones too), const draws nothing, int both ends, double
    Uniform, log base ** Uniform, categorical vals[Intn]; then 4 words, then the seed."""
    space = {
        "zeta": {"type": "categorical", "vals": ["a", [1, 2], None]},
        "alpha": {"type": "int", "minval": -2, "maxval": 3},
        "opt": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1}, "name": "sgd"},
        "mid": {"type": "double", "minval": 0.5, "maxval": 0.75},
        "fixed": {"type": "const", "val": 3},
    }
    rng = MasterRandom(11)
    expected = []
    for _ in range(3):
        alpha = -2 + rng.below(6)
        mid = rng.uniform(0.5, 0.75)
        exponent = rng.uniform(-4, -1)
        zeta = rng.below(3)
        rng.request_id()
        hparams = {
            "zeta": ["a", [1, 2], None][zeta],
            "alpha": alpha,
            "opt": {"lr": 10.0**exponent, "name": "sgd"},
            "mid": mid,
            "fixed": 3,
        }
        params = {"alpha": alpha, "mid": mid, "opt.lr": exponent, "zeta": zeta}
        expected.append((hparams, params, rng.trial_seed()))
    made = created_trials(space, 3, 11)
    assert [(t.hparams, t.params, t.trial_seed) for t in made] == expected
    assert list(made[0].hparams) == list(space)  # values come back in the config's order
    assert random_points(space, 3, 11) == [h for h, _, _ in expected]
    reordered = dict(reversed(list(space.items())))
    assert created_trials(reordered, 3, 11) == made  # the YAML's order draws the same


def test_int_draws_reach_both_ends() -> None:
    space = {"k": {"type": "int", "minval": 0, "maxval": 2}}
    values = [t.hparams["k"] for t in created_trials(space, 300, 3)]
    assert set(values) == {0, 1, 2}


def test_a_grid_trial_draws_only_its_request_id_and_seed() -> None:
    space = {"k": {"type": "int", "minval": 0, "maxval": 9, "count": 3}}
    made = created_trials(space, 3, 1673293395, sample=False)
    assert [t.trial_seed for t in made] == MASTER_TRIAL_SEEDS[1673293395][:3]
    assert all(t.params == {} and t.hparams == {} for t in made)


def test_experiment_seed_is_a_uint32_as_the_masters() -> None:
    base = {"entrypoint": "m:T", "searcher": {"name": "single", "metric": "loss"}}
    top = 2**32 - 1
    assert load_config({**base, "reproducibility": {"experiment_seed": top}}) is not None
    with pytest.raises(errors.InvalidConfigException) as raised:
        load_config({**base, "reproducibility": {"experiment_seed": top + 1}})
    assert "reproducibility.experiment_seed" in str(raised.value)
    assert "<= 4294967295" in str(raised.value) and "32-bit" in str(raised.value)
    with pytest.raises(ValueError, match="<= 4294967295"):
        ReproducibilityConfig.from_exp_conf({"reproducibility": {"experiment_seed": top + 1}})


# ----- what a search records ----------------------------------------------------------------

SPACE: Dict[str, Any] = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1, "count": 2},
    "width": {"type": "int", "minval": 1, "maxval": 8, "count": 2},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "global_batch_size": 8,
}


def _study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=optuna.storages.InMemoryStorage())


def _asked(settings: SearchSettings, seed: Any, count: int) -> List[optuna.Trial]:
    study, trials = _study(), []
    if settings.grid:
        enqueue_grid(study, settings.grid)
    for _ in range(count):
        trial = _worker._ask(study, settings, 0, SPACE, seed=seed)
        assert trial is not None
        trials.append(trial)
        study.tell(trial, 1.0)
    return trials


@pytest.mark.parametrize("name", ["random", "single"])
def test_random_and_single_trials_are_the_masters(name: str) -> None:
    searcher = {"name": name, "metric": "loss", "max_trials": 4}
    settings = SearchSettings.from_upfront(searcher, SPACE)
    count = settings.max_trials
    trials = _asked(settings, 5, count)
    made = created_trials(SPACE, count, 5)
    assert [t.user_attrs["hparams"] for t in trials] == [m.hparams for m in made]
    assert [t.user_attrs["trial_seed"] for t in trials] == [m.trial_seed for m in made]
    assert [suggest(t, SPACE) for t in trials] == [m.hparams for m in made]  # as recorded


def test_a_grid_trial_gets_the_seed_of_its_place_in_the_masters_order() -> None:
    settings = SearchSettings.from_upfront({"name": "grid", "metric": "loss"}, SPACE)
    trials = _asked(settings, 1673293395, len(settings.grid))
    places = [t.user_attrs["grid_point"] for t in trials]
    seeds = [t.trial_seed for t in created_trials(SPACE, len(places), 1673293395, sample=False)]
    assert [t.user_attrs["trial_seed"] for t in trials] == [seeds[p] for p in places]
    assert seeds[:3] == MASTER_TRIAL_SEEDS[1673293395][:3]


def test_asha_trials_each_get_a_seed_that_repeats_with_the_experiment_seed() -> None:
    searcher = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_trials": 4,
        "max_length": {"batches": 8},
    }
    config = load_config({"entrypoint": "m:T", "hyperparameters": SPACE, "searcher": searcher})
    settings = SearchSettings.from_searcher(config.searcher, config.lengths, None)

    def seeds(seed: int) -> List[int]:
        return [t.user_attrs["trial_seed"] for t in _asked(settings, seed, 3)]

    assert seeds(3) == seeds(3) != seeds(4)
    assert len(set(seeds(3))) == 3 and all(0 <= s < 2**31 for s in seeds(3))


def test_without_an_experiment_seed_each_trial_still_draws_one() -> None:
    settings = SearchSettings.from_upfront(
        {"name": "random", "metric": "loss", "max_trials": 3}, SPACE
    )
    seeds = [t.user_attrs["trial_seed"] for t in _asked(settings, None, 3)]
    assert len(set(seeds)) == 3 and all(0 <= s < 2**31 for s in seeds)
