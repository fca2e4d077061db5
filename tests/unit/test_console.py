"""Console log handlers: Lightning's step aside for one further up; the bar swaps, never adds.

The terminal itself is tested through a pseudo-terminal in tests/integration/test_terminal.py.
"""

import io
import logging
import sys
from typing import Iterator, List, Tuple

import pytest

from det_lightning.adapters.console import AboveTheBar, PrintedFurtherUp, above_the_bar

Loggers = Tuple[logging.Logger, logging.Logger, io.StringIO]


@pytest.fixture
def loggers() -> Iterator[Loggers]:
    """``app`` with a console handler (the user's), ``app.lib`` with one of its own that steps
    aside (as Lightning's), both writing to a stand-in for the terminal (a test makes it
    ``sys.stderr``: pytest's own capture swaps that between a fixture and its test)."""
    terminal = io.StringIO()
    app, lib = logging.getLogger("test_console_app"), logging.getLogger("test_console_app.lib")
    user, own = logging.StreamHandler(terminal), logging.StreamHandler(terminal)
    user.setFormatter(logging.Formatter("USER %(message)s"))
    own.setFormatter(logging.Formatter("OWN %(message)s"))
    own.addFilter(PrintedFurtherUp(lib))
    app.addHandler(user)
    lib.addHandler(own)
    lib.setLevel(logging.INFO)
    yield app, lib, terminal
    app.removeHandler(user)
    lib.removeHandler(own)
    lib.setLevel(logging.NOTSET)
    lib.propagate = True


def shown(terminal: io.StringIO) -> List[str]:
    return terminal.getvalue().splitlines()


def test_a_line_prints_once_in_the_format_further_up(
    loggers: Loggers, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, lib, terminal = loggers
    monkeypatch.setattr(sys, "stderr", terminal)
    lib.info("hello")
    assert shown(terminal) == ["USER hello"]


def test_the_own_handler_prints_when_nothing_further_up_will(
    loggers: Loggers, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, lib, terminal = loggers
    monkeypatch.setattr(sys, "stderr", terminal)
    app.handlers[0].setLevel(logging.ERROR)
    lib.info("quiet above")
    lib.propagate = False
    lib.info("not propagated")
    assert shown(terminal) == ["OWN quiet above", "OWN not propagated"]


def test_the_bar_swaps_console_handlers_adds_none_and_restores(
    loggers: Loggers, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, lib, terminal = loggers
    monkeypatch.setattr(sys, "stderr", terminal)
    before = (list(app.handlers), list(lib.handlers), logging.lastResort)
    with above_the_bar():
        assert [type(h) for h in app.handlers + lib.handlers] == [AboveTheBar, AboveTheBar]
        assert isinstance(logging.lastResort, AboveTheBar)
        assert logging.getLogger("test_console_app.lib.quiet").handlers == []
        lib.info("under the bar")
    assert (app.handlers, lib.handlers, logging.lastResort) == before
    assert shown(terminal) == ["USER under the bar"]
