"""What every system's runner shares: the step clock and the measurements taken from it."""

import json
import pathlib
import statistics
import time
from typing import Any, Dict, List, Optional


class Clock:
    """Timestamps at the start and end of every training step.

    Every system calls ``start()`` first and ``end()`` last in its step body (two
    ``perf_counter`` calls and two list appends: the same tiny cost everywhere), so the time
    between two ``start()`` calls is one step plus whatever the framework does between steps.
    """

    def __init__(self) -> None:
        self.starts: List[float] = []
        self.cpu_starts: List[float] = []
        self.ends: List[float] = []
        self.first_done_wall: Optional[float] = None
        self.call: Optional[float] = None

    def called(self) -> None:
        """Marks the moment the system was asked to train (before building its trainer)."""
        self.call = time.perf_counter()

    def start(self) -> None:
        self.starts.append(time.perf_counter())
        self.cpu_starts.append(time.process_time())

    def end(self) -> None:
        self.ends.append(time.perf_counter())
        if self.first_done_wall is None:
            self.first_done_wall = time.time()

    def per_step(self, cpu: bool = False) -> float:
        """Seconds per step in steady state (wall clock, or this process's CPU time): the first
        tenth of the steps (at least one) is warm-up and not counted."""
        marks = self.cpu_starts if cpu else self.starts
        n = len(marks)
        if n < 3:
            return float("nan")
        skip = min(max(1, n // 10), n - 2)
        return (marks[-1] - marks[skip]) / (n - 1 - skip)

    def gaps(self) -> List[float]:
        """``gaps()[i]``: from the end of step ``i`` to the start of step ``i + 1`` (0-based)."""
        return [s - e for e, s in zip(self.ends, self.starts[1:])]

    def to_first_step(self) -> float:
        """From ``called()`` to the start of the first step."""
        assert self.call is not None and self.starts
        return self.starts[0] - self.call


def save_costs(clock: Clock, every: int) -> List[float]:
    """The extra time of the between-step gaps that held a checkpoint save, over the median of
    the gaps that did not: the save's cost as the training loop feels it."""
    gaps = clock.gaps()
    saving = [i for i in range(len(gaps)) if (i + 1) % every == 0]
    plain = [g for i, g in enumerate(gaps) if i not in saving and i > 0]
    base = statistics.median(plain) if plain else 0.0
    return [gaps[i] - base for i in saving]


def find_checkpoint(root: pathlib.Path, steps: int) -> pathlib.Path:
    """The Determined-layout checkpoint directory under ``root`` saved after ``steps`` batches."""
    for metadata in root.rglob("metadata.json"):
        try:
            found = json.loads(metadata.read_text()).get("steps_completed")
        except ValueError:
            continue
        if found == steps:
            return metadata.parent
    raise FileNotFoundError(f"no checkpoint of step {steps} under {root}")


def checksum(model: Any) -> float:
    """Sum of all weights (float64): equal across systems when they ran the same math."""
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def step_result(clock: Clock, model: Any, fit_s: float, world_size: int) -> Dict[str, Any]:
    return {
        "world_size": world_size,
        "per_step_s": clock.per_step(),
        "cpu_per_step_s": clock.per_step(cpu=True),
        "steps_timed": len(clock.starts),
        "fit_s": fit_s,
        "first_done_wall": clock.first_done_wall,
        "checksum": checksum(model),
    }
