"""Shared test setup: every test runs in its own working directory with its own storage."""

import os
import pathlib
import signal
from typing import Iterator, Tuple

import pytest
import torch

from tests.fixtures import warm
from tests.fixtures.object_store import S3, Switch, moto_server, s3_endpoint
from tests.fixtures.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from tests.fixtures.writers import close_open_writers


@pytest.fixture(autouse=True)
def isolated_run(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """A fresh working directory; checkpoints, TensorBoard files, object-store caches and the
    real Determined's storage (``$XDG_DATA_HOME/determined``) all go to separate folders under ``tmp_path``.

    The real Determined copies the working directory into each checkpoint's ``code/``, so its
    storage must not lie inside the working directory (it would copy itself recursively).
    """
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("DET_LIGHTNING_TENSORBOARD_DIR", str(tmp_path / "tensorboard"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "determined-storage"))
    # Local copies of object-store checkpoints: the test's own, never ~/.cache.
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "cache"))
    # Under torch >= 2.6 the real Determined cannot read its own checkpoints otherwise.
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    torch.set_num_threads(1)
    yield work
    close_open_writers()  # while the working directory is still this test's
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.fixture(autouse=True)
def warm_launcher(request: pytest.FixtureRequest) -> Iterator[None]:
    """Processes the tests start through ``tests/fixtures/warm.py`` fork from a warm server;
    a test marked ``new_interpreters`` (its subject is the interpreter boundary) starts real
    ones."""
    warm.set_cold(request.node.get_closest_marker("new_interpreters") is not None)
    yield
    warm.set_cold(False)


def pytest_configure(config: pytest.Config) -> None:
    """The suite handles SIGINT as a terminal's Python does, however it was started. A shell
    script that runs it in the background (``nohup ... &``: CI's scripts, a long run left
    behind) hands it SIGINT ignored, which every process it starts would inherit: the tests of
    what a SIGINT does (``test_core_preempt.py``, the search template's, the warm launcher's)
    would then see it ignored and fail. Runs in pytest's process and in each xdist worker (they
    start after it, and inherit it)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_CHECKED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@pytest.fixture(autouse=True)
def signals_left_as_found() -> Iterator[None]:
    """A test leaves this process's handlers of the signals that end a process as it found
    them; one that does not fails here. A SIGINT left ignored, say, would be inherited by every
    process a later test starts in this worker. Handlers of SIGUSR1 and SIGUSR2 are put back
    without failing: the real Determined, run in-process by the parity tests, installs its
    stack-trace handler on SIGUSR1."""
    signals = (*_CHECKED_SIGNALS, signal.SIGUSR1, signal.SIGUSR2)
    before = {signum: signal.getsignal(signum) for signum in signals}
    yield
    changed = {
        signum.name: signal.getsignal(signum)
        for signum in _CHECKED_SIGNALS
        if signal.getsignal(signum) != before[signum]
    }
    for signum, handler in before.items():
        if handler is not None:  # None: set outside Python, which cannot set it back
            signal.signal(signum, handler)
    assert not changed, f"the test left these signal handlers changed: {changed}"


@pytest.fixture
def checkpoint_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "checkpoints"


@pytest.fixture(scope="session")
def _moto_server() -> Iterator[Tuple[str, Switch]]:
    with moto_server() as server:
        yield server


@pytest.fixture
def s3_server(
    _moto_server: Tuple[str, Switch], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[S3]:
    """A fresh bucket on moto's S3 server on loopback (``tests/fixtures/object_store.py``)."""
    with s3_endpoint(_moto_server, monkeypatch, tmp_path) as server:
        yield server


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    # Tests that import the real determined are marked, so they can be selected or excluded.
    for item in items:
        if "compat" in pathlib.Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.interop)
    _ = os
