"""Log lines on the terminal: each record printed once, above the progress bar while it is drawn.

Python hands a record to the handlers of its logger and then of each ancestor, as long as
``propagate`` holds. Two console handlers on that path print it twice. Lightning puts one on
the ``lightning`` logger whenever it is imported, and the root logger has one when the script
calls ``logging.basicConfig`` (Determined's examples do)::

    record of lightning.fabric.utilities.distributed
      lightning's handler          "INFO: Initializing distributed ..."        (Lightning's format)
      root's handler               "INFO: [pid] lightning.fabric...: ..."      (the user's format)

``dedupe_lightning_console`` makes Lightning's handlers step aside for a console handler further
up (the user's format wins); without one, they print as before. While the bar is drawn,
``above_the_bar`` swaps every console handler for one writing through ``tqdm.write`` (which
clears the bar, prints the line, redraws the bar) and adds none: a logger with no handler of its
own keeps printing through its ancestors', so nothing appears twice and nothing disappears.
"""

import contextlib
import logging
import sys
from typing import Any, Iterator, List, Optional, Tuple

from tqdm import tqdm

# The loggers Lightning gives console handlers of its own (lightning/__init__.py and the
# __init__.py of lightning.pytorch and lightning.fabric).
LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")


class AboveTheBar(logging.Handler):
    """Prints what ``console`` would, through ``tqdm.write``, so the bar stays below the line.

    Args:
        console: the console handler it stands in for; its level, filters, format and stream
            apply.
    """

    def __init__(self, console: "logging.StreamHandler[Any]") -> None:
        super().__init__(console.level)
        self.console = console

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(self.console.filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.console.format(record), file=self.console.stream)
            self.console.flush()
        except Exception:
            self.handleError(record)


def is_console(handler: logging.Handler) -> bool:
    """Whether ``handler`` prints to the terminal (standard output or error)."""
    if isinstance(handler, AboveTheBar):
        return True
    if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
        return False
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return any(handler.stream is s for s in streams if s is not None)


def _ancestors(logger: logging.Logger) -> Iterator[logging.Logger]:
    """The loggers a record of ``logger`` propagates to after ``logger`` itself."""
    current: Optional[logging.Logger] = logger
    while current is not None and current.propagate:
        current = current.parent
        if current is not None:
            yield current


class PrintedFurtherUp(logging.Filter):
    """Drops a record from a console handler of ``logger`` when a console handler of a logger it
    propagates to will print it too."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(
            is_console(h) and record.levelno >= h.level
            for ancestor in _ancestors(self.logger)
            for h in ancestor.handlers
        )


def dedupe_lightning_console() -> None:
    """Lightning's console handlers print only what no console handler further up will."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in logger.handlers:
            if is_console(handler) and not any(
                isinstance(f, PrintedFurtherUp) for f in handler.filters
            ):
                handler.addFilter(PrintedFurtherUp(logger))


def _all_loggers() -> List[logging.Logger]:
    known = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger(), *(lg for lg in known if isinstance(lg, logging.Logger))]


def _above_the_bar(handler: logging.Handler) -> logging.Handler:
    """``handler`` written through ``tqdm.write`` when it prints to the terminal."""
    if is_console(handler) and isinstance(handler, logging.StreamHandler):
        return AboveTheBar(handler)
    return handler


@contextlib.contextmanager
def above_the_bar() -> Iterator[None]:
    """Every console handler, of every logger, writes through ``tqdm.write`` meanwhile; so does
    ``logging.lastResort``, which prints warnings when no logger on the way has a handler."""
    last_resort = logging.lastResort
    if last_resort is not None:
        logging.lastResort = _above_the_bar(last_resort)
    swapped: List[Tuple[logging.Logger, List[logging.Handler]]] = []
    for logger in _all_loggers():
        handlers = [_above_the_bar(h) for h in logger.handlers]
        if handlers != logger.handlers:
            swapped.append((logger, logger.handlers))
            logger.handlers = handlers
    try:
        yield
    finally:
        logging.lastResort = last_resort
        for logger, original in swapped:
            logger.handlers = original
