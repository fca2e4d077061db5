"""gloo's socket threads below the training thread (adapters/gloo_loop.py), on a real gloo
process group of one rank in this process. The two-process run is in
tests/distributed/test_launch.py (``test_gloo_socket_threads_run_below_the_training_thread``)."""

import datetime
import gc
import os
import sys
import time
from typing import Iterator, List

import pytest
import torch.distributed as dist

from det_lightning.adapters import gloo_loop

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread ids: Linux")


@pytest.fixture
def new_loops() -> Iterator[List[int]]:
    """The socket threads of a gloo group made for the test (a group of one rank, its own
    store), alive while the test runs."""
    assert _gone(gloo_loop.loop_threads()), "another gloo group of this process is alive"
    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=30))
    deadline = time.monotonic() + 10.0
    while not gloo_loop.loop_threads() and time.monotonic() < deadline:
        time.sleep(0.001)  # (the thread names itself once it runs)
    made = gloo_loop.loop_threads()
    assert made, "a gloo group starts a gloo_tcp_loop thread"
    yield made
    del group  # its device, and the loop thread with it, go with the last reference
    assert _gone(made)


def _gone(threads: List[int], seconds: float = 10.0) -> bool:
    """Whether these threads end within ``seconds`` (gloo's devices are freed by the garbage
    collector, and a loop thread ends at its next tick)."""
    deadline = time.monotonic() + seconds
    while set(threads) & set(gloo_loop.loop_threads()):
        if time.monotonic() > deadline:
            return False
        gc.collect()
        time.sleep(0.01)
    return True


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_the_loop_goes_ten_levels_below_the_caller_once(new_loops: List[int]) -> None:
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    assert [_nice(tid) for tid in new_loops] == [caller] * len(new_loops)  # as gloo made it

    changed = gloo_loop.lower_loop_priority({})

    assert set(new_loops) <= set(changed)
    assert [_nice(tid) for tid in new_loops] == [min(19, caller + 10)] * len(new_loops)
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller  # the training thread keeps its own
    assert gloo_loop.lower_loop_priority({}) == []  # a second fit, or a new group: no change


def test_the_variable_sets_how_far_and_zero_leaves_the_loop_alone(new_loops: List[int]) -> None:
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    assert gloo_loop.lower_loop_priority({gloo_loop.GLOO_LOOP_NICE_ENV: "0"}) == []
    assert [_nice(tid) for tid in new_loops] == [caller] * len(new_loops)

    gloo_loop.lower_loop_priority({gloo_loop.GLOO_LOOP_NICE_ENV: "15"})
    assert [_nice(tid) for tid in new_loops] == [min(19, caller + 15)] * len(new_loops)
    # Lower already than a smaller amount asks: left there (raising it back needs a privilege).
    gloo_loop.lower_loop_priority({gloo_loop.GLOO_LOOP_NICE_ENV: "5"})
    assert [_nice(tid) for tid in new_loops] == [min(19, caller + 15)] * len(new_loops)


@pytest.mark.parametrize("text", ["-1", "20", "ten", "2.5"])
def test_a_bad_value_names_the_variable_and_the_range(text: str) -> None:
    with pytest.raises(ValueError, match=r"DET_LIGHTNING_GLOO_LOOP_NICE=.*0 .* 19"):
        gloo_loop.nice_increment({gloo_loop.GLOO_LOOP_NICE_ENV: text})


def test_no_loop_thread_no_change() -> None:
    """Without a gloo group in the process (one process training), nothing is touched."""
    assert _gone(gloo_loop.loop_threads()), "another gloo group of this process is alive"
    assert gloo_loop.lower_loop_priority({}) == []
