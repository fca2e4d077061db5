"""A search stopped by its experiment's cancel or pause mark (``_interrupt.StopWatcher``): a
client's ``cancel()`` or ``pause()`` from any process counts as the first SIGTERM, passed on to
the trial once."""

import pathlib
import signal
import threading
from typing import List, Optional

import pytest

from det_lightning import errors
from det_lightning._runner._record import clear_stop, mark_stop, stop_mark, stopped_at, stopped_by
from det_lightning._runner.search._interrupt import SearchInterrupt, StopWatcher
from det_lightning._runner.search._jobs import run_trial
from det_lightning.pytorch._local_store import LocalStore


def test_a_cancel_is_passed_on_once_before_or_after_the_trial_starts() -> None:
    sent: List[int] = []
    before = SearchInterrupt()
    before.stop({"by": "cancel", "canceled": "t"})
    with before.forwarding(sent.append):  # the trial started after: told at once
        before.stop({"by": "kill", "canceled": "t"})  # seen again: nothing more
    assert sent == [signal.SIGTERM] and before.received == "cancel"

    sent.clear()
    after = SearchInterrupt()
    with after.forwarding(sent.append):
        assert sent == []
        after.stop({"by": "kill", "canceled": "t"})
    assert sent == [signal.SIGTERM] and after.received == "kill"
    assert after.mark == {"by": "kill", "canceled": "t"}


def test_a_signal_first_stays_what_stopped_the_search() -> None:
    interrupt = SearchInterrupt()
    sent: List[int] = []
    with interrupt.forwarding(sent.append):
        interrupt._handle(signal.SIGINT, None)
        interrupt.stop({"by": "cancel"})
    assert interrupt.received == "SIGINT" and interrupt.mark is None
    assert sent == [signal.SIGINT]


def test_the_watcher_sees_the_mark_another_process_writes(tmp_path: pathlib.Path) -> None:
    folder = LocalStore(tmp_path / "experiment")
    interrupt = SearchInterrupt()
    seen = threading.Event()
    with (
        StopWatcher(folder, interrupt, every=0.05),
        interrupt.forwarding(lambda signum: seen.set()),
    ):
        assert not seen.wait(0.3) and interrupt.received is None  # no mark: nothing happens
        mark_stop(folder, "kill")
        assert seen.wait(30), "the watcher never passed the cancel on"
    assert interrupt.received == "kill"

    paused, seen = SearchInterrupt(), threading.Event()
    with (
        StopWatcher(LocalStore(tmp_path / "another"), paused, every=0.05),
        paused.forwarding(lambda signum: seen.set()),
    ):
        mark_stop(LocalStore(tmp_path / "another"), "pause")
        assert seen.wait(30), "the watcher never passed the pause on"
    assert paused.received == "pause" and paused.mark is not None


@pytest.mark.parametrize(("by", "said"), [("cancel", "canceled"), ("pause", "paused")])
def test_no_trial_starts_once_the_experiment_is_stopped(
    tmp_path: pathlib.Path, by: str, said: str
) -> None:
    """Checked when the trial would start, not only every so often: a reader that saw the
    experiment CANCELED or PAUSED (no trial RUNNING) never sees one train after."""

    class NoStarts:
        def start(self, request: object) -> None:
            raise AssertionError(f"a trial was started after the {by}")

    folder = LocalStore(tmp_path / "experiment")
    mark_stop(folder, by)
    interrupt = SearchInterrupt()
    with StopWatcher(folder, interrupt, every=3600.0):  # its thread would look in an hour
        with pytest.raises(errors.TrialPreempted, match=f"{said} before this trial began"):
            run_trial(NoStarts(), interrupt, None, None)  # type: ignore[arg-type]
    assert interrupt.received == by


def test_a_cancel_outranks_a_pause_and_a_rerun_takes_both_back(tmp_path: pathlib.Path) -> None:
    folder = LocalStore(tmp_path / "experiment")
    assert stop_mark(folder) is None and clear_stop(folder) is None
    mark_stop(folder, "pause")
    paused = stop_mark(folder)
    assert paused is not None and stopped_by(paused) == "pause"
    assert stopped_at(paused).startswith("20")  # when, in UTC
    mark_stop(folder, "kill")  # a pause, then a kill: the experiment ends CANCELED
    killed = stop_mark(folder)
    assert killed is not None and stopped_by(killed) == "kill"
    assert clear_stop(folder) == killed
    assert stop_mark(folder) is None and sorted(p.name for p in folder.path.iterdir()) == []


def test_a_failing_read_is_looked_at_again_not_raised(tmp_path: pathlib.Path) -> None:
    """A bucket's own error (not an OSError) while reading the mark neither ends the watcher's
    thread nor the search (``look`` runs before each trial): the next look reads it."""

    class Flaky(LocalStore):
        failures = 3

        def read_once(self, name: str) -> Optional[bytes]:
            if Flaky.failures:
                Flaky.failures -= 1
                raise RuntimeError("the endpoint answered 500")
            return super().read_once(name)

    folder = Flaky(tmp_path / "experiment")
    mark_stop(folder, "cancel")
    interrupt = SearchInterrupt()
    with StopWatcher(folder, interrupt, every=3600.0):
        interrupt.look()  # raises nothing
        assert interrupt.received is None and Flaky.failures == 2
    seen = threading.Event()
    with (
        StopWatcher(folder, interrupt, every=0.05),
        interrupt.forwarding(lambda signum: seen.set()),
    ):
        assert seen.wait(30) and Flaky.failures == 0
    assert interrupt.received == "cancel"


class _ReadFailsOnce(LocalStore):
    """A folder whose first read fails, as a bucket's that did not answer once does."""

    failed = False

    def read_once(self, name: str) -> Optional[bytes]:
        if not self.failed:
            self.failed = True
            raise OSError("the bucket did not answer")
        return super().read_once(name)


def test_a_rerun_takes_back_a_mark_it_could_not_read(tmp_path: pathlib.Path) -> None:
    # Left there, the mark would stop the continued run once its watcher read it.
    folder = _ReadFailsOnce(tmp_path / "experiment")
    mark_stop(folder, "pause")
    mark_stop(folder, "cancel")
    assert clear_stop(folder) is None and folder.failed  # not read: nothing to say
    assert stop_mark(folder) is None and list(folder.path.iterdir()) == []
