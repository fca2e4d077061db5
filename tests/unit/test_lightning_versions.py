"""The one table of Lightning releases (``adapters/lightning/versions.py``): every release
``pyproject.toml`` allows has exactly one row, a release outside the table runs Lightning's own
loop with one warning saying what it costs, and both lean pieces read the same gate."""

import warnings

import pytest
from packaging.version import Version

from det_lightning.adapters.lightning import hooks, lean, lean_validation, versions

# Every lightning release on the index from 2.4.0 to 2.6.6 (2.6.2 and 2.6.3, withdrawn
# malicious releases, excluded by pyproject.toml and refused at import).
ALLOWED = (
    "2.4.0",
    "2.5.0",
    "2.5.0.post0",
    "2.5.1",
    "2.5.1.post0",
    "2.5.2",
    "2.5.3",
    "2.5.4",
    "2.5.5",
    "2.5.6",
    "2.6.0",
    "2.6.1",
    "2.6.4",
    "2.6.5",
    "2.6.6",
)


@pytest.mark.parametrize("release", ALLOWED)
def test_every_allowed_release_has_exactly_one_row(release: str) -> None:
    rows = [
        row for row in versions.TABLE if Version(row.first) <= Version(release) <= Version(row.last)
    ]
    assert len(rows) == 1
    assert versions.shape_for(release) == rows[0]


def test_the_rows_are_ordered_and_apart() -> None:
    for row in versions.TABLE:
        assert Version(row.first) <= Version(row.last)
    for earlier, later in zip(versions.TABLE, versions.TABLE[1:]):
        assert Version(earlier.last) < Version(later.first)
    assert [row.marks_last_batch for row in versions.TABLE] == [False, False, False, True]
    assert [row.broadcasts_sigterm for row in versions.TABLE] == [False, False, True, True]
    assert [row.skips_next_val for row in versions.TABLE] == [False, True, True, True]


@pytest.mark.parametrize("release", ["2.3.3", "2.6.7", "2.7.0", "3.0.0"])
def test_a_release_outside_the_table_has_no_row(release: str) -> None:
    assert versions.shape_for(release) is None


@pytest.fixture
def uncovered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed Lightning as if newer than the table."""
    monkeypatch.setattr(versions, "SHAPE", None)
    monkeypatch.setattr(versions, "_warned", False)
    monkeypatch.delenv(versions.LEAN_ENV, raising=False)
    monkeypatch.delenv(hooks.LEAN_HOOKS_ENV, raising=False)
    monkeypatch.delenv(lean_validation.LEAN_VALIDATION_ENV, raising=False)


@pytest.mark.usefixtures("uncovered")
def test_an_uncovered_release_turns_both_lean_pieces_off_with_one_warning() -> None:
    with pytest.warns(UserWarning, match=r"Lightning's own loop.*1\.5x the instructions") as seen:
        assert not lean.enabled()
        assert not hooks.enabled()
        assert not lean_validation.enabled()
        assert not lean.enabled()
    assert len(seen) == 1
    assert "2.4.0 to 2.6.6" in str(seen[0].message)


@pytest.mark.usefixtures("uncovered")
def test_switched_off_by_the_environment_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(versions.LEAN_ENV, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not lean.enabled() and not hooks.enabled() and not lean_validation.enabled()


def test_the_environment_switches_each_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "SHAPE", versions.TABLE[-1])
    assert lean.enabled() and hooks.enabled() and lean_validation.enabled()
    monkeypatch.setenv(hooks.LEAN_HOOKS_ENV, "off")
    assert lean.enabled() and not hooks.enabled() and lean_validation.enabled()
    monkeypatch.setenv(lean_validation.LEAN_VALIDATION_ENV, "no")
    assert lean.enabled() and not lean_validation.enabled()
    monkeypatch.setenv(versions.LEAN_ENV, "0")
    assert not lean.enabled() and not hooks.enabled() and not lean_validation.enabled()


def test_fingerprint_ignores_layout_but_not_code() -> None:
    source = "    @override\n    def f(self):\n        # a comment\n\n        return 1\n"
    assert versions.fingerprint(source) == versions.fingerprint("def f(self):\n  return 1")
    assert versions.fingerprint(source) != versions.fingerprint("def f(self):\n  return 2")
