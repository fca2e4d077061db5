"""The Optuna privates the search relies on (``det_lightning/_runner/_optuna.py``), checked
against the installed Optuna on each storage kind the search opens, and read nowhere else."""

import ast
import pathlib
from typing import Any, Iterator, List

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from det_lightning._runner import _optuna

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "det_lightning"
PRIVATES = {"_trial_id", "_study_id", "_storage", "_backend", "_file_path"}


@pytest.fixture(params=["memory", "journal", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    if request.param == "memory":
        yield optuna.storages.InMemoryStorage()
    elif request.param == "journal":
        yield JournalStorage(JournalFileBackend(str(tmp_path / "search.journal")))
    else:  # an RDBStorage under Optuna's cache, as get_storage returns it
        opened = optuna.storages.get_storage(f"sqlite:///{tmp_path / 'search.db'}")
        yield opened
        opened._backend.engine.dispose()


def test_ids_are_the_storages_and_unique_across_its_studies(storage: Any) -> None:
    brackets = [optuna.create_study(study_name=f"b{i}", storage=storage) for i in range(2)]
    asked = [study.ask() for study in brackets for _ in range(2)]
    ids = [_optuna.trial_id(t) for t in asked]
    assert len(set(ids)) == 4  # numbers repeat per study (0, 1, 0, 1); ids do not
    assert [t.number for t in asked] == [0, 1, 0, 1]
    for study in brackets:
        assert _optuna.study_id(study) == storage.get_study_id_from_name(study.study_name)
        assert _optuna.storage_of(study) is study._storage
        frozen = study.get_trials(deepcopy=False)
        assert [_optuna.trial_id(t) for t in frozen] == [
            _optuna.trial_id(t) for t in asked if t.study is study
        ]


def test_a_trial_asked_elsewhere_is_written_through_this_study(
    storage: Any, tmp_path: pathlib.Path
) -> None:
    study = optuna.create_study(study_name="s", storage=storage)
    asked = study.ask()
    again = optuna.load_study(study_name="s", storage=storage)
    live = _optuna.live_trial(again, _optuna.trial_id(asked))
    live.set_user_attr("rungs", {"0": 1.5})
    live.report(1.5, step=4)
    same = _optuna.live_trial(again, study.get_trials(deepcopy=False)[0])
    assert same.user_attrs["rungs"] == {"0": 1.5}
    (frozen,) = study.get_trials(deepcopy=False)
    assert frozen.intermediate_values == {4: 1.5}


def test_the_storage_kinds_are_told_apart(storage: Any, tmp_path: pathlib.Path) -> None:
    rdb, journal = _optuna.rdb_of(storage), _optuna.journal_file_of(storage)
    if isinstance(storage, optuna.storages.InMemoryStorage):
        assert rdb is None and journal is None
    elif isinstance(storage, JournalStorage):
        assert rdb is None and journal == str(tmp_path / "search.journal")
    else:
        assert isinstance(rdb, optuna.storages.RDBStorage) and journal is None
        assert rdb.engine.dialect.name == "sqlite"


def _private_reads(path: pathlib.Path) -> List[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATES:
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "Trial"
            and ast.unparse(node.func.value) in ("optuna.trial", "trial")
        ):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: Trial(...)")
    return found


def test_optunas_privates_are_read_only_in_the_one_module() -> None:
    """The search reads Optuna's privates through ``_runner/_optuna.py`` alone, so an Optuna
    release that moves one breaks one module and this contract, not the search."""
    allowed = PACKAGE / "_runner" / "_optuna.py"
    searched = [p for p in (PACKAGE / "_runner").rglob("*.py") if p != allowed]
    assert len(searched) > 30
    found = [line for path in searched for line in _private_reads(path)]
    assert found == [], "\n".join(found)
    assert _private_reads(allowed)  # the check sees them where they are
