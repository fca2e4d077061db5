"""The search's per-trial state (``_runner/_trial_record.py``): its names stay what stored
searches hold, ``TrialRecord`` reads a trial whole, and nothing in ``_runner`` names a user
attribute by a string literal."""

import ast
import pathlib
from typing import List

import optuna
import pytest

from det_lightning._runner import _trial_record as record_module
from det_lightning._runner._trial_record import TrialRecord

RUNNER = pathlib.Path(__file__).resolve().parents[2] / "det_lightning" / "_runner"

# What journals and databases written by earlier releases hold: renaming one would orphan them.
STORED = {
    "HPARAMS": "hparams",
    "TRIAL_NUMBER": "trial_number",
    "HOST": "host",
    "PID": "pid",
    "LEASE": "lease",
    "CLAIM": "claim",
    "RUNGS": "rungs",
    "RUNG": "rung",
    "STOPPED": "stopped",
    "CHECKPOINT": "checkpoint",
    "BATCHES": "batches",
    "INVALID_HP": "invalid_hp",
    "UNRANKED": "unranked",
    "SURPLUS": "surplus",
    "SUPERSEDED": "superseded",
    "CONTINUES": "continues",
    "ORIGIN": "origin",
    "GRID_POINT": "grid_point",
    "TRIAL_SEED": "trial_seed",
    "VALIDATION_AT": "validation@",  # a prefix: validation@<batches>
}


def test_the_names_are_the_stored_schema() -> None:
    names = {n: getattr(record_module, n) for n in record_module.__all__ if n.isupper()}
    assert names == STORED


def test_a_record_reads_a_trial_whole_from_its_storage(tmp_path: pathlib.Path) -> None:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "search.journal"))
    )
    study = optuna.create_study(study_name="b0", storage=storage)
    trial = study.ask()
    for name, value in {
        "TRIAL_NUMBER": 7,
        "HPARAMS": {"lr": 0.1},
        "HOST": "machine-a",
        "PID": 42,
        "RUNGS": {"0": 1.5, "1": 0.5},
        "RUNG": 1,
        "STOPPED": True,
        "CHECKPOINT": "s3://b/x/trial-7/uuid",
        "BATCHES": 16,
        "CONTINUES": 3,
    }.items():
        trial.set_user_attr(getattr(record_module, name), value)
    (frozen,) = optuna.load_study(study_name="b0", storage=storage).get_trials()
    record = TrialRecord.of(frozen)
    assert record == TrialRecord(
        number=7,
        hparams={"lr": 0.1},
        host="machine-a",
        pid=42,
        rungs={0: 1.5, 1: 0.5},
        rung=1,
        stopped=True,
        checkpoint="s3://b/x/trial-7/uuid",
        batches=16,
        continues=3,
    )
    assert record.counted
    trial.set_user_attr(record_module.INVALID_HP, True)  # as the worker writes a bare InvalidHP
    invalid = TrialRecord.of(study.get_trials()[0])
    assert invalid.invalid_hp == "True" and not invalid.counted
    with pytest.raises(AttributeError):
        record.rung = 2  # type: ignore[misc]


def _literal_attr_names(path: pathlib.Path) -> List[str]:
    return _literal_attr_names_in(path, RUNNER)


def _literal_attr_names_in(path: pathlib.Path, root: pathlib.Path) -> List[str]:
    """``set_user_attr("x", ...)``, ``*.user_attrs.get("x")``, ``*.user_attrs["x"]`` and
    ``"x" in *.user_attrs`` (a lease's own ``lease.get("host")`` is not one)."""

    def attrs(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "user_attrs"

    def literal(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        named = False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            method, owner = node.func.attr, node.func.value
            named = literal(node.args[0]) and (
                method == "set_user_attr" or (method == "get" and attrs(owner))
            )
        elif isinstance(node, ast.Subscript):
            named = attrs(node.value) and literal(node.slice)
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            named = (
                literal(node.left)
                and isinstance(node.ops[0], (ast.In, ast.NotIn))
                and attrs(node.comparators[0])
            )
        if named:
            found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}")
    return found


def test_the_runner_names_user_attributes_only_through_the_schema(
    tmp_path: pathlib.Path,
) -> None:
    paths = list(RUNNER.rglob("*.py"))
    assert len(paths) > 30
    found = [line for path in paths for line in _literal_attr_names(path)]
    assert found == [], found
    text = (
        't.set_user_attr("rungs", 1)\nf.user_attrs.get("rung")\nf.user_attrs["hparams"]\n'
        '"stopped" in f.user_attrs\nlease.get("host")\n'
    )
    copy = tmp_path / "_runner" / "probe.py"
    copy.parent.mkdir()
    copy.write_text(text)
    assert len(_literal_attr_names_in(copy, tmp_path / "_runner")) == 4  # the check sees them
