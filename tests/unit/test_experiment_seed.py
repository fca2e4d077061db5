"""The seed a search runs with when its config sets none: drawn once by the worker that creates
the search, recorded in its storage, and the same for every worker and rerun
(``det_lightning._runner.search._experiment_seed``)."""

import logging
import pathlib
import threading
from typing import Any, Iterator, List

import optuna
import pytest

from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._trial_record import HPARAMS
from det_lightning._runner.search import _experiment_seed
from det_lightning._runner.search._experiment_seed import (
    EXPERIMENT_SEED,
    experiment_seed,
    recorded_experiment_seed,
)
from det_lightning._runner.search._storage import open_storage, open_studies
from det_lightning.pytorch._seeds import MAX_EXPERIMENT_SEED

RANDOM = {"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": 4}}
GRID = {"name": "grid", "metric": "loss", "max_length": {"batches": 4}}
SPACE = {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}}
GRID_SPACE = {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0, "count": 3}}


@pytest.fixture
def journal(tmp_path: pathlib.Path) -> Iterator[Any]:
    """A search's journal file, opened as each worker opens it."""
    yield lambda: open_storage(str(tmp_path / "search.journal"))


def _settings(searcher: Any = None, space: Any = None) -> SearchSettings:
    return SearchSettings.from_upfront(searcher or RANDOM, space or SPACE)


def test_the_creator_records_the_configured_seed_and_every_worker_reads_it(journal: Any) -> None:
    (first,) = open_studies(journal(), "exp", _settings(), seed=7)
    (second,) = open_studies(journal(), "exp", _settings(), seed=7)  # another worker, a rerun
    assert recorded_experiment_seed(first) == recorded_experiment_seed(second) == 7
    assert experiment_seed(second, 7) == 7


def test_without_a_configured_seed_one_is_drawn_once_for_the_search(journal: Any) -> None:
    (created,) = open_studies(journal(), "exp", _settings(), seed=None)
    drawn = recorded_experiment_seed(created)
    assert drawn is not None and 0 <= drawn <= MAX_EXPERIMENT_SEED
    for _ in range(3):  # other workers, reruns: the creator's seed, never a new draw
        (opened,) = open_studies(journal(), "exp", _settings(), seed=None)
        assert experiment_seed(opened, None) == drawn
    (other,) = open_studies(journal(), "another-exp", _settings(), seed=None)
    assert recorded_experiment_seed(other) != drawn  # each experiment draws its own


def test_a_worker_that_opened_the_study_first_waits_for_its_creator(journal: Any) -> None:
    """The study exists, its creator has not recorded the seed yet: the worker waits for it
    rather than draw a second one."""
    study = optuna.create_study(study_name="exp-bracket-0", storage=journal())
    creators_view = optuna.load_study(study_name="exp-bracket-0", storage=journal())
    late = threading.Timer(0.3, creators_view.set_user_attr, (EXPERIMENT_SEED, 1234))
    late.start()
    try:
        assert experiment_seed(study, None, wait_s=60) == 1234
    finally:
        late.cancel()


def test_a_grids_waiting_points_are_not_taken_for_an_old_search(journal: Any) -> None:
    """A grid's points are enqueued as soon as its study exists: trials, but none admitted."""
    settings = _settings(GRID, GRID_SPACE)
    (study,) = open_studies(journal(), "grid", settings, seed=None)
    drawn = recorded_experiment_seed(study)
    assert len(study.get_trials()) == 3 and drawn is not None
    bare = optuna.create_study(study_name="bare-grid", storage=journal())
    for point in range(3):
        bare.enqueue_trial({"lr": 0.1 * (point + 1)})
    threading.Timer(0.2, bare.set_user_attr, (EXPERIMENT_SEED, 99)).start()
    assert experiment_seed(bare, None, wait_s=60) == 99


def test_a_search_begun_before_seeds_were_recorded_keeps_its_trials_own_seeds(
    journal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admitted trials and no seed: None at once (each trial drew its own seed then)."""
    study = optuna.create_study(study_name="old", storage=journal())
    study.ask().set_user_attr(HPARAMS, {"lr": 0.5})

    def no_waiting(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s for a seed an old search never records")

    monkeypatch.setattr(_experiment_seed.time, "sleep", no_waiting)
    assert experiment_seed(study, None) is None
    assert recorded_experiment_seed(study) is None  # nothing is written into an old search


def test_a_creator_killed_before_recording_leaves_the_waiter_to_record_one(
    journal: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    study = optuna.create_study(study_name="orphan", storage=journal())
    now: List[float] = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(_experiment_seed.time, "sleep", sleep)
    with caplog.at_level(logging.WARNING, logger="det_lightning"):
        seed = experiment_seed(study, None, wait_s=5, clock=lambda: now[0])
    assert seed is not None and now[0] >= 5
    assert recorded_experiment_seed(study) == seed
    assert f"recorded {seed}" in caplog.text
    assert experiment_seed(study, None) == seed  # the next worker reads it, waiting for nothing


def test_describing_a_search_reads_its_seed_and_writes_none(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``experiment describe`` (``search_seed``) neither waits for a seed nor records one: an
    old search without one stays without one."""
    from det_lightning._runner.config import load_config
    from det_lightning._runner.plan import plan_experiment
    from det_lightning._runner.search._worker import search_seed

    def no_waiting(seconds: float) -> None:
        raise AssertionError("describing a search waited for its seed")

    monkeypatch.setattr(_experiment_seed.time, "sleep", no_waiting)
    config = {"name": "old", "entrypoint": "python3 train.py", "searcher": RANDOM}
    config["hyperparameters"] = SPACE
    plan = plan_experiment(load_config(config), tmp_path, checkpoint_dir=str(tmp_path / "ckpt"))
    journal = str(tmp_path / "search.journal")
    study = optuna.create_study(
        study_name=f"{plan.experiment_id}-bracket-0", storage=open_storage(journal)
    )
    assert search_seed(plan, journal) is None  # created by a worker of an older version
    study.ask().set_user_attr(HPARAMS, {"lr": 0.5})
    assert search_seed(plan, journal) is None
    assert (
        recorded_experiment_seed(
            optuna.load_study(study_name=study.study_name, storage=open_storage(journal))
        )
        is None
    )
    study.set_user_attr(EXPERIMENT_SEED, 17)
    assert search_seed(plan, journal) == 17
    seeded = plan_experiment(
        load_config({**config, "reproducibility": {"experiment_seed": 5}}), tmp_path
    )
    assert search_seed(seeded, journal) == 5
