"""A rerun whose folder and search storage disagree is refused before anything is written
(``search._storage.check_search_is_here``); the command-level drills are in
``tests/integration/test_experiment_identity.py``."""

import json
import pathlib

import optuna
import pytest

from det_lightning._runner._record import RECORD_NAME
from det_lightning._runner.plan import UsageError
from det_lightning._runner.search._storage import check_search_is_here, open_storage
from det_lightning.pytorch._local_store import LocalStore

KEY = "exp-0123456789"


def _study_with_a_trial(url: str) -> None:
    storage = open_storage(url)
    study = optuna.create_study(study_name=f"{KEY}-bracket-0", storage=storage)
    study.ask()


def test_a_damaged_record_still_gets_the_refusal_not_a_traceback(tmp_path: pathlib.Path) -> None:
    folder = LocalStore(tmp_path / KEY)
    (folder.path / "trial-1").mkdir(parents=True)
    (folder.path / RECORD_NAME).write_text("{not json")
    with pytest.raises(UsageError, match="It began with another storage: rerun with the"):
        check_search_is_here(None, folder, KEY)
    assert not (folder.path / "search.journal").exists()  # read, never made


def test_a_search_without_its_folder_is_refused_until_its_record_is_there(
    tmp_path: pathlib.Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'search.db'}"
    folder = LocalStore(tmp_path / "elsewhere" / KEY)
    check_search_is_here(url, folder, KEY)  # nothing anywhere: a new experiment
    _study_with_a_trial(url)
    with pytest.raises(UsageError, match=rf"{KEY}'s search in {url} has 1 trial\(s\)") as e:
        check_search_is_here(url, folder, KEY)
    assert f"--study-name NAME for each of {KEY}-bracket-0" in str(e.value)
    assert not folder.path.exists()
    folder.write_once(RECORD_NAME, json.dumps({"id": KEY, "storage": url}).encode())
    check_search_is_here(url, folder, KEY)  # a worker that began it wrote this first
