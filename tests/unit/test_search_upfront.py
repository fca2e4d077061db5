"""``grid`` and ``random`` on Optuna, in an in-memory study: the grid's points come out of
``study.ask()`` in Determined's order with the values ``grid_points`` computes, each point
runs once however workers race, and a random search keeps to ``max_trials``."""

from typing import Any, Dict, List

import optuna
import pytest

from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner.config import Lengths, grid_points, load_config
from det_lightning._runner.search import _reporter, _worker
from det_lightning._runner.search._grid import GRID_POINT, enqueue_grid
from det_lightning._runner.search._sample import suggest

SPACE: Dict[str, Any] = {
    "global_batch_size": 8,
    "optimizer": {
        "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1, "count": 3},
        "name": "sgd",
    },
    "width": {"type": "int", "minval": 1, "maxval": 4, "count": 3},
    "act": {"type": "categorical", "vals": ["relu", None, [1, 2]]},
    "dropout": {"type": "double", "minval": 0.3, "maxval": 0.9, "count": 3},
}


def _settings(name: str, **searcher: Any) -> SearchSettings:
    return SearchSettings.from_upfront({"name": name, "metric": "loss", **searcher}, SPACE)


def _study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=optuna.storages.InMemoryStorage())


def _run_grid(study: optuna.Study, settings: SearchSettings) -> List[Dict[str, Any]]:
    drawn = []
    while _worker.next_bracket([study], settings) == 0:
        trial = _worker._ask(study, settings, 0, SPACE, seed=None)
        if trial is not None:
            drawn.append(trial.user_attrs["hparams"])
            study.tell(trial, 1.0)
    return drawn


def test_a_grid_study_hands_out_determineds_points_last_first() -> None:
    settings = _settings("grid")
    expected = grid_points(SPACE)
    # 3 act x 3 dropout x 3 lr x 3 width (int 1..4, count 3: 1, 2.5 -> 3, 4), names in order.
    assert len(expected) == 81 == settings.max_trials
    assert expected[0] == {
        "global_batch_size": 8,
        "act": "relu",
        "dropout": 0.3,
        "optimizer": {"lr": pytest.approx(1e-4), "name": "sgd"},
        "width": 1,
    }
    assert [p["width"] for p in expected[:3]] == [1, 3, 4]  # the last name varies fastest
    study = _study()
    enqueue_grid(study, settings.grid)
    drawn = _run_grid(study, settings)
    assert drawn == expected[::-1]
    # The double's last point is Determined's 0.3 + 2 * (0.9 - 0.3) / 2, one ulp above maxval:
    # the trial gets it as it is, and Optuna's out-of-range warning (an error here) is not raised.
    assert sorted({p["dropout"] for p in drawn}) == [0.3, pytest.approx(0.6), 0.9000000000000001]


def test_a_grid_point_enqueued_twice_runs_once() -> None:
    """Two workers opened a new search at once and both enqueued every point."""
    settings = _settings("grid")
    study = _study()
    enqueue_grid(study, settings.grid)
    enqueue_grid(study, settings.grid)  # nothing missing: nothing added
    assert len(study.trials) == 81
    for index, params in enumerate(settings.grid[:5]):  # the race: 5 points twice
        study.enqueue_trial(dict(params), user_attrs={GRID_POINT: index})
    drawn = _run_grid(study, settings)
    assert len(drawn) == 81 and drawn == grid_points(SPACE)[::-1]
    surplus = [t for t in study.trials if t.user_attrs.get(_reporter.SURPLUS)]
    assert [t.user_attrs[GRID_POINT] for t in surplus] == [0, 1, 2, 3, 4]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in surplus)


def test_a_trial_asked_after_the_last_grid_point_is_dropped() -> None:
    """Another worker took the last waiting point between the check and ask(): ask() then
    makes a fresh trial, which must not run."""
    settings = _settings("grid")
    study = _study()
    trial = _worker._ask(study, settings, 0, SPACE, seed=None)
    assert trial is None
    (only,) = study.trials
    assert only.user_attrs[_reporter.SURPLUS] and only.state == optuna.trial.TrialState.FAIL


def test_random_keeps_to_max_trials_when_workers_ask_at_once() -> None:
    settings = _settings("random", max_trials=3)
    assert settings.brackets[0].rung_units == () and settings.brackets[0].max_trials == 3
    study = _study()
    asked = [_worker._ask(study, settings, 0, SPACE, seed=1) for _ in range(5)]
    assert [t is not None for t in asked] == [True, True, True, False, False]
    invalid = asked[1]
    assert invalid is not None
    invalid.set_user_attr(_reporter.INVALID_HP, "too wide")  # dropped for InvalidHP: replaced
    assert _worker.next_bracket([study], settings) == 0
    assert _worker._ask(study, settings, 0, SPACE, seed=1) is not None
    assert _worker.next_bracket([study], settings) is None


def test_random_ints_cover_both_ends_uniformly() -> None:
    settings = SearchSettings.from_upfront(
        {"name": "random", "metric": "loss", "max_trials": 600},
        {"k": {"type": "int", "minval": 0, "maxval": 2}},
    )
    study = _study()
    values = []
    for _ in range(600):
        trial = _worker._ask(
            study, settings, 0, {"k": {"type": "int", "minval": 0, "maxval": 2}}, seed=5
        )
        assert trial is not None
        values.append(trial.user_attrs["hparams"]["k"])
        study.tell(trial, 0.0)
    counts = [values.count(k) for k in (0, 1, 2)]
    assert sum(counts) == 600 and all(150 < c < 250 for c in counts), counts


def test_random_draws_repeat_with_the_experiment_seed() -> None:
    def draw(seed: int) -> List[Dict[str, Any]]:
        settings = _settings("random", max_trials=4)
        study = _study()
        trials = [_worker._ask(study, settings, 0, SPACE, seed=seed) for _ in range(4)]
        return [t.user_attrs["hparams"] for t in trials if t is not None]

    assert draw(3) == draw(3) and draw(3) != draw(4) and len(draw(3)) == 4


def test_the_plan_of_grid_and_random_searches() -> None:
    base = {"entrypoint": "model_def:RegressionTrial", "hyperparameters": SPACE}
    grid = load_config(
        {**base, "searcher": {"name": "grid", "metric": "loss", "max_concurrent_trials": 4}}
    )
    settings = SearchSettings.from_upfront(grid.searcher, grid.raw["hyperparameters"])
    assert settings.brackets[0].max_concurrent_trials == 4 and len(settings.grid) == 81
    # the Optuna parameters of the first trial: the last point, as suggest() reads them back
    assert settings.grid[0] == {
        "act": 2,
        "dropout": 0.9000000000000001,
        "optimizer.lr": -1.0,
        "width": 4,
    }
    study = _study()
    enqueue_grid(study, settings.grid[:1])
    trial = _worker._ask(study, settings, 0, SPACE, seed=None)
    assert trial is not None and trial.user_attrs["hparams"] == grid_points(SPACE)[-1]
    assert suggest(trial, SPACE) == grid_points(SPACE)[-1]  # read back again: the same


def _asha_settings() -> SearchSettings:
    searcher = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_trials": 12,
        "divisor": 2,
        "max_rungs": 3,
        "mode": "standard",
        "time_metric": "batches",
        "max_time": 8,
    }
    return SearchSettings.from_searcher(searcher, Lengths.from_config({"searcher": searcher}), 8)


def test_seeded_draws_differ_across_brackets_and_trials() -> None:
    settings = _asha_settings()
    assert len(settings.brackets) > 1
    drawn = []
    for index in range(len(settings.brackets)):
        study = _study()
        for _ in range(settings.brackets[index].max_trials):
            trial = _worker._ask(study, settings, index, SPACE, seed=5)
            assert trial is not None
            drawn.append(repr(trial.user_attrs["hparams"]))
    # Before: every bracket's k-th trial drew the same point (seed + k in each study).
    assert len(set(drawn)) == len(drawn) == sum(b.max_trials for b in settings.brackets)


def test_a_seed_gives_the_same_points_whatever_the_order_workers_ask_in() -> None:
    """Two runs of one seeded random search: in the second, a worker asks once more than the
    budget (a surplus trial, dropped) before another trial raises InvalidHP and is replaced."""

    def points(extra_asks: int) -> List[str]:
        settings = _settings("random", max_trials=3)
        study = _study()
        asked = [_worker._ask(study, settings, 0, SPACE, seed=9) for _ in range(3 + extra_asks)]
        first = asked[0]
        assert first is not None and asked[3:] == [None] * extra_asks
        first.set_user_attr(_reporter.INVALID_HP, "no")  # replaced by a new draw
        assert _worker._ask(study, settings, 0, SPACE, seed=9) is not None
        return sorted(
            repr(t.user_attrs["hparams"]) for t in study.get_trials() if _reporter.counted(t)
        )

    assert points(0) == points(1) == points(2)
