"""``det-lightning experiment --dashboard``: the message without optuna-dashboard, and the
command started with it (a stand-in program that records its arguments, not a server)."""

import importlib.util
import os
import pathlib
import sys
from typing import Any, Optional

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from det_lightning._runner.config import load_config
from det_lightning._runner.plan import plan_experiment
from det_lightning._runner.search import _dashboard
from det_lightning._runner.search._storage import JOURNAL_NAME
from tests.integration.cli_support import PROJECT


def _plan(checkpoints: pathlib.Path, config: str = "search.yaml") -> Any:
    return plan_experiment(
        load_config(str(PROJECT / config)), PROJECT, checkpoint_dir=str(checkpoints)
    )


def _without_dashboard(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: Optional[str] = None) -> Any:
        return None if name == "optuna_dashboard" else real(name, package)

    monkeypatch.setattr(_dashboard.importlib.util, "find_spec", find_spec)


def test_without_optuna_dashboard_it_says_how_to_install_and_run_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _without_dashboard(monkeypatch)
    plan = _plan(tmp_path / "ckpt")
    with _dashboard.dashboard_beside(plan, wanted=True):
        pass
    err = capsys.readouterr().err
    assert "optuna-dashboard is not installed" in err
    assert "pip install 'det_lightning[dashboard]'" in err
    assert f"optuna-dashboard {plan.checkpoint_root / JOURNAL_NAME}" in err
    assert not (tmp_path / "ckpt").exists()  # nothing started, nothing created
    single = _plan(tmp_path / "c2", "const.yaml")  # a search of one trial, with its storage
    with _dashboard.dashboard_beside(single, wanted=True):
        pass
    assert f"optuna-dashboard {single.checkpoint_root / JOURNAL_NAME}" in capsys.readouterr().err


def fake_dashboard(root: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """An importable ``optuna_dashboard`` and an ``optuna-dashboard`` program on PATH that
    writes its arguments to the returned file and exits."""
    (root / "pkgs" / "optuna_dashboard").mkdir(parents=True)
    (root / "pkgs" / "optuna_dashboard" / "__init__.py").write_text("")
    (root / "bin").mkdir()
    record = root / "argv.txt"
    program = root / "bin" / "optuna-dashboard"
    program.write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    program.chmod(0o755)
    monkeypatch.syspath_prepend(str(root / "pkgs"))
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    paths = [str(root / "pkgs")] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    return record


def test_with_optuna_dashboard_it_serves_the_search_storage(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    if pathlib.Path(sys.executable).with_name("optuna-dashboard").exists():
        monkeypatch.setattr(_dashboard.sys, "executable", str(tmp_path / "python"))
    record = fake_dashboard(tmp_path, monkeypatch)
    plan = _plan(tmp_path / "ckpt")
    journal = plan.checkpoint_root / JOURNAL_NAME
    assert _dashboard.dashboard_command(str(journal)) == [
        str(tmp_path / "bin" / "optuna-dashboard"),
        str(journal),
    ]
    with _dashboard.dashboard_beside(plan, wanted=True):
        # The journal exists before the dashboard reads it, with the grid's study.
        studies = optuna.get_all_study_summaries(JournalStorage(JournalFileBackend(str(journal))))
        assert [s.study_name.endswith("-bracket-0") for s in studies] == [True]
    assert record.read_text().split() == [str(journal)]  # waited for: it ran and exited
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bin' / 'optuna-dashboard'} {journal}" in err and "Ctrl-C" in err
    with _dashboard.dashboard_beside(plan, wanted=False):
        pass
    assert capsys.readouterr().err == ""
