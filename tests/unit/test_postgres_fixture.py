"""The test PostgreSQL server's fixture fails, naming the fix, where no server is installed (CI
must never skip the database tests)."""

import pathlib

import pytest

from tests.fixtures import postgres


def test_no_installed_server_is_an_error_naming_the_install(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "BIN_GLOB", str(tmp_path / "*" / "bin"))
    with pytest.raises(RuntimeError, match="scripts/ensure-postgres.sh"):
        postgres.bin_dir()


def test_the_newest_installed_server_is_used(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for version in ("9", "15", "13"):
        (tmp_path / version / "bin").mkdir(parents=True)
        (tmp_path / version / "bin" / "initdb").touch()
    (tmp_path / "16" / "bin").mkdir(parents=True)  # no initdb: a client-only install
    monkeypatch.setattr(postgres, "BIN_GLOB", str(tmp_path / "*" / "bin"))
    assert postgres.bin_dir() == tmp_path / "15" / "bin"
