"""A search stopped by its experiment's cancel mark (``_interrupt.CancelWatcher``): a client's
``cancel()`` from any process counts as the first SIGTERM, passed on to the trial once."""

import pathlib
import signal
import threading
from typing import List

import pytest

from det_lightning import errors
from det_lightning._runner._record import mark_canceled
from det_lightning._runner.search._interrupt import CancelWatcher, SearchInterrupt
from det_lightning._runner.search._jobs import run_trial
from det_lightning.pytorch._local_store import LocalStore


def test_a_cancel_is_passed_on_once_before_or_after_the_trial_starts() -> None:
    sent: List[int] = []
    before = SearchInterrupt()
    before.cancel({"by": "cancel", "canceled": "t"})
    with before.forwarding(sent.append):  # the trial started after: told at once
        before.cancel({"by": "kill", "canceled": "t"})  # seen again: nothing more
    assert sent == [signal.SIGTERM] and before.received == "cancel"

    sent.clear()
    after = SearchInterrupt()
    with after.forwarding(sent.append):
        assert sent == []
        after.cancel({"by": "kill", "canceled": "t"})
    assert sent == [signal.SIGTERM] and after.received == "kill"
    assert after.canceled == {"by": "kill", "canceled": "t"}


def test_a_signal_first_stays_what_stopped_the_search() -> None:
    interrupt = SearchInterrupt()
    sent: List[int] = []
    with interrupt.forwarding(sent.append):
        interrupt._handle(signal.SIGINT, None)
        interrupt.cancel({"by": "cancel"})
    assert interrupt.received == "SIGINT" and interrupt.canceled is None
    assert sent == [signal.SIGINT]


def test_the_watcher_sees_the_mark_another_process_writes(tmp_path: pathlib.Path) -> None:
    folder = LocalStore(tmp_path / "experiment")
    interrupt = SearchInterrupt()
    seen = threading.Event()
    with (
        CancelWatcher(folder, interrupt, every=0.05),
        interrupt.forwarding(lambda signum: seen.set()),
    ):
        assert not seen.wait(0.3) and interrupt.received is None  # no mark: nothing happens
        mark_canceled(folder, "kill")
        assert seen.wait(30), "the watcher never passed the cancel on"
    assert interrupt.received == "kill"


def test_no_trial_starts_once_the_experiment_is_canceled(tmp_path: pathlib.Path) -> None:
    """Checked when the trial would start, not only every so often: a reader that saw the
    experiment CANCELED (no trial RUNNING) never sees one train after."""

    class NoStarts:
        def start(self, request: object) -> None:
            raise AssertionError("a trial was started after the cancel")

    folder = LocalStore(tmp_path / "experiment")
    mark_canceled(folder, "cancel")
    interrupt = SearchInterrupt()
    with CancelWatcher(folder, interrupt, every=3600.0):  # its thread would look in an hour
        with pytest.raises(errors.TrialPreempted, match="canceled before this trial began"):
            run_trial(NoStarts(), interrupt, None, None)  # type: ignore[arg-type]
    assert interrupt.received == "cancel"


def test_a_failing_read_is_looked_at_again_not_raised(tmp_path: pathlib.Path) -> None:
    """A bucket's own error (not an OSError) while reading the mark neither ends the watcher's
    thread nor the search (``look`` runs before each trial): the next look reads it."""

    class Flaky(LocalStore):
        failures = 3

        def read_once(self, name: str) -> "bytes | None":
            if Flaky.failures:
                Flaky.failures -= 1
                raise RuntimeError("the endpoint answered 500")
            return super().read_once(name)

    folder = Flaky(tmp_path / "experiment")
    mark_canceled(folder, "cancel")
    interrupt = SearchInterrupt()
    with CancelWatcher(folder, interrupt, every=3600.0):
        interrupt.look()  # raises nothing
        assert interrupt.received is None and Flaky.failures == 2
    seen = threading.Event()
    with (
        CancelWatcher(folder, interrupt, every=0.05),
        interrupt.forwarding(lambda signum: seen.set()),
    ):
        assert seen.wait(30) and Flaky.failures == 0
    assert interrupt.received == "cancel"
