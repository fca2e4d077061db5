"""gloo's socket thread below the training thread in the CPU scheduler.

With the gloo backend every rank has a ``gloo_tcp_loop`` thread (one per gloo device; torch's
groups share the default device's): an epoll loop that reads what the other ranks send. Its event handler only *tries* the connection's lock
(``Pair::handleEvents``, ``std::try_to_lock``) and returns when another thread holds it; the
socket is still readable, so ``epoll_wait`` returns at once and the loop spins until the lock is
free. The holder is the rank's own gloo work thread, posting the next send or receive. When the
ranks' threads outnumber the cores (two ranks on two cores: a training thread, the loop and the
work threads each), the scheduler can take the core from the holder and give it to the spinning
loop, for a whole time slice. On the 2-core machine this happened on about one MLP step in ten,
each costing about 3 ms of the loop's CPU: a third of the CPU of an overhead-bound DDP step, in
Determined and det_lightning alike (``benchmarks/results/gloo-loop-priority_cpu-2core_2026-11-28.md``).

At a lower priority (a higher nice value) the loop still runs whenever a core is free or it is
woken by data, but it no longer takes the core from the threads it waits for. Lowering a
thread's priority needs no privilege; nothing raises it back (that would need one).

``DET_LIGHTNING_GLOO_LOOP_NICE``: how much to add to the calling thread's nice value for the
loop threads, 0 to 19 (0 leaves them as gloo made them). Linux only (thread ids in
``/proc/self/task``); elsewhere nothing changes.
"""

import logging
import os
import sys
from typing import List, Mapping, Optional

logger = logging.getLogger("det_lightning.pytorch")

GLOO_LOOP_NICE_ENV = "DET_LIGHTNING_GLOO_LOOP_NICE"
DEFAULT_NICE = 10
LOOP_THREAD = "gloo_tcp_loop"  # the name gloo's Loop::run gives its thread
_MOST_NICE = 19


def nice_increment(environ: Optional[Mapping[str, str]] = None) -> int:
    """``DET_LIGHTNING_GLOO_LOOP_NICE``, or the default.

    >>> nice_increment({}), nice_increment({"DET_LIGHTNING_GLOO_LOOP_NICE": "0"})
    (10, 0)
    """
    text = (os.environ if environ is None else environ).get(GLOO_LOOP_NICE_ENV, "").strip()
    if not text:
        return DEFAULT_NICE
    if not text.isdigit() or int(text) > _MOST_NICE:
        raise ValueError(
            f"{GLOO_LOOP_NICE_ENV}={text!r}: expected a whole number from 0 (leave gloo's "
            f"socket threads as they are) to {_MOST_NICE}, or unset for {DEFAULT_NICE}."
        )
    return int(text)


def loop_threads() -> List[int]:
    """The thread ids of this process's ``gloo_tcp_loop`` threads (none off Linux)."""
    tasks = "/proc/self/task"
    if not sys.platform.startswith("linux") or not os.path.isdir(tasks):
        return []
    found = []
    for name in os.listdir(tasks):
        try:
            with open(f"{tasks}/{name}/comm") as comm:
                if comm.read().strip() == LOOP_THREAD:
                    found.append(int(name))
        except OSError:  # the thread ended meanwhile
            continue
    return sorted(found)


def lower_loop_priority(environ: Optional[Mapping[str, str]] = None) -> List[int]:
    """Gives every ``gloo_tcp_loop`` thread of this process the calling thread's nice value
    plus ``nice_increment()`` (at most 19); a thread already that low or lower is left alone,
    so calling again (a new gloo group, a second fit) changes only new threads. Returns the
    ids of the threads changed."""
    increment = nice_increment(environ)
    if increment == 0:
        return []
    threads = loop_threads()
    if not threads:
        return []
    target = min(_MOST_NICE, os.getpriority(os.PRIO_PROCESS, 0) + increment)
    changed = []
    for tid in threads:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < target:
                os.setpriority(os.PRIO_PROCESS, tid, target)
                changed.append(tid)
        except OSError as error:  # gone meanwhile, or a sandbox that forbids it: no harm
            logger.debug(f"gloo socket thread {tid} keeps its priority: {error}")
    return changed
