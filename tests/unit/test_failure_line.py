"""The line a trial's failure logs: ``trial <n> failed: <its error's first line>; <then>``."""

import logging
import pathlib

import pytest

from det_lightning._runner._failure import log_failure
from det_lightning.pytorch._local_store import LocalStore


@pytest.mark.parametrize(
    "message, shown",
    [
        ("No module named 'determined.common': not provided.", "not provided; restart 1 of 1"),
        ("division by zero", "division by zero; restart 1 of 1"),
    ],
)
def test_the_failure_line_joins_the_error_and_what_follows_without_a_stray_stop(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, message: str, shown: str
) -> None:
    try:
        raise RuntimeError(message)
    except RuntimeError as e:
        with caplog.at_level(logging.ERROR, logger="det_lightning"):
            log_failure(LocalStore(tmp_path), 1, e, "restart 1 of 1 from its latest checkpoint")
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("trial 1 failed: ") and shown in line and ".;" not in line, line
    assert "RuntimeError" in (tmp_path / "trial-1" / "error.log").read_text()
