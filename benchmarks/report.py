"""From the workers' JSON results to the markdown report: medians, ranges, ratios, targets."""

import math
import statistics
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

Runs = Dict[Tuple[str, str], List[Dict[str, Any]]]  # (workload, system) -> counted runs

STEP_WORKLOADS = ("mlp", "cnn", "validation", "amp", "ddp-mlp", "ddp-cnn")
LABELS = {
    "raw": "raw PyTorch loop",
    "raw-best": "raw loop, pinned + non-blocking (raw-best)",
    "lightning": "Lightning (manual optimization)",
    "det_lightning": "det_lightning",
    "det_lightning+tb": "det_lightning, TensorBoard on",
    "det_lightning+sync": "det_lightning, sync_checkpoints=True",
    "determined": "Determined 0.38.1 Trainer",
    "determined+tb": "Determined 0.38.1, TensorBoard on",
}

# A steps table's column: (header, result key, scale, digits).
Column = Tuple[str, str, float, int]
CPU_TIME: Column = ("CPU ms / step", "cpu_per_step_s", 1e3, 3)
CPU_COLUMNS: Tuple[Column, ...] = (
    ("wall ms / step", "per_step_s", 1e3, 3),
    ("peak RSS MB", "maxrss_mb", 1, 0),
)


def _values(runs: List[Dict[str, Any]], key: str, pick: Callable = lambda v: v) -> List[float]:
    found = [pick(r[key]) for r in runs if key in r and r[key] is not None]
    return [v for v in found if not (isinstance(v, float) and math.isnan(v))]


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _mean_list(values: List[float]) -> float:
    return sum(values) / len(values)


def _cell(values: List[float], scale: float, digits: int) -> str:
    if not values:
        return "—"
    med = statistics.median(values) * scale
    if len(values) == 1:
        return f"{med:.{digits}f}"
    lo, hi = min(values) * scale, max(values) * scale
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}" if a is not None and b else "—"


# The systems a steps table's ratio columns can compare with, by their header.
RATIO_HEADERS = {
    "raw": "× raw",
    "raw-best": "× raw-best",
    "lightning": "× Lightning",
    "determined": "× Determined",
}


def _determined_like(system: str) -> str:
    """The Determined system a row compares with: TensorBoard on for a TensorBoard row.

    >>> _determined_like("det_lightning+tb"), _determined_like("det_lightning+sync")
    ('determined+tb', 'determined')
    """
    return "determined+tb" if system.endswith("+tb") else "determined"


def _copied(system: str, runs: List[Dict[str, Any]]) -> str:
    """The state det_lightning copies for a background write (0 when written in the thread)."""
    if system != "det_lightning":
        return "0" if system.startswith("det_lightning") else ""
    return _cell(_values(runs, "state_mb"), 1, 0).split(" ")[0]


def _paired_save_ratios(runs: List[Dict[str, Any]]) -> List[float]:
    """Per run: its mean save time over the mean of the bare ``torch.save`` it did itself."""
    return [
        _mean_list(r["save_s"]) / _mean_list(r["bare_save_s"])
        for r in runs
        if r.get("save_s") and r.get("bare_save_s")
    ]


def _failure(
    runs: List[Dict[str, Any]], failures: Dict[Tuple[str, str], str], key: Tuple[str, str]
) -> Optional[str]:
    if runs:
        return None
    return "not measured: " + failures.get(key, "no run")


class Report:
    """Builds the markdown from the counted runs.

    Args:
        runs: counted runs (the warm-up repetition already dropped) by (workload, system).
        failures: a one-line reason by (workload, system) for pairs that never ran to the end.
        systems: the systems in table order.
        workloads: the ``Workload`` objects by name.
    """

    def __init__(
        self,
        runs: Runs,
        failures: Dict[Tuple[str, str], str],
        systems: List[str],
        workloads: Dict[str, Any],
    ) -> None:
        self.runs = runs
        self.failures = failures
        self.systems = systems
        self.workloads = workloads

    def median(
        self, workload: str, system: str, key: str, pick: Callable = lambda v: v
    ) -> Optional[float]:
        return _median(_values(self.runs.get((workload, system), []), key, pick))

    def outcomes(self, workload: str) -> Iterator[Tuple[str, List[Dict[str, Any]], Optional[str]]]:
        """``(system, counted runs, failure or None)`` for each system, in table order, that ran
        ``workload`` or failed at it; the others get no row."""
        for system in self.systems:
            key = (workload, system)
            if key in self.runs or key in self.failures:
                runs = self.runs.get(key, [])
                yield system, runs, _failure(runs, self.failures, key)

    # ----- tables ---------------------------------------------------------------------------
    def steps_table(
        self,
        timed: Column = CPU_TIME,
        columns: Tuple[Column, ...] = CPU_COLUMNS,
        ratios: Tuple[str, ...] = ("raw", "lightning"),
    ) -> List[str]:
        """One row per (step workload, system): ``timed`` with its range and its ratios to each
        of ``ratios`` (``RATIO_HEADERS``; "determined" is Determined with TensorBoard for a
        TensorBoard row), then each of ``columns`` (median), then whether the weights match."""
        lines = [
            f"| workload | system | {timed[0]}, median (min–max) "
            + "".join(f"| {RATIO_HEADERS[r]} " for r in ratios)
            + "".join(f"| {c[0]} " for c in columns)
            + "| same weights as raw |",
            "|---|---|---" + "|---" * (len(ratios) + len(columns)) + "|---|",
        ]
        empty = "| " * (len(columns) + len(ratios) + 1) + "|"
        for name in STEP_WORKLOADS:
            if name not in self.workloads:
                continue
            raw_sum = self.median(name, "raw", "checksum")
            for system, runs, failed in self.outcomes(name):
                title = self.workloads[name].title
                if failed:
                    lines.append(f"| {title} | {LABELS[system]} | {failed} {empty}")
                    continue
                per_step = self.median(name, system, timed[1])
                against = [_determined_like(system) if r == "determined" else r for r in ratios]
                lines.append(
                    f"| {title} | {LABELS[system]} "
                    f"| {_cell(_values(runs, timed[1]), timed[2], timed[3])} "
                    + "".join(
                        f"| {_ratio(per_step, self.median(name, r, timed[1]))} " for r in against
                    )
                    + "".join(
                        f"| {_cell(_values(runs, c[1]), c[2], c[3]).split(' ')[0]} "
                        for c in columns
                    )
                    + f"| {self.parity(name, runs, raw_sum)} |"
                )
        return lines

    def parity(self, name: str, runs: List[Dict[str, Any]], raw_sum: Optional[float]) -> str:
        processes = self.workloads[name].processes
        worlds = set(_values(runs, "world_size"))
        if worlds and worlds != {processes}:
            return f"**ran with {sorted(worlds)} process(es), not {processes}**"
        if processes > 1:
            return f"n/a ({processes} ranks; each system shards the data its own way)"
        sums = _values(runs, "checksum")
        if raw_sum is None or not sums:
            return "—"
        worst = max(abs(s - raw_sum) for s in sums) / max(abs(raw_sum), 1e-12)
        return "yes" if worst < 1e-5 else f"no (rel. diff {worst:.1e})"

    def instructions_table(self) -> List[str]:
        """Per step, for each system that ran ``<workload>#instructions``: the instructions of
        every thread, × raw, Lightning and Determined, and the share of threads other than
        the main one (a TensorBoard event writer, a background checkpoint writer)."""
        names = [
            n
            for n in ("mlp", "validation")
            if any(k[0] == f"{n}#instructions" for k in (*self.runs, *self.failures))
        ]
        if not names:
            return []
        lines = [
            "| workload | system | M instructions / step | of it, other threads "
            "| × raw | × Lightning | × Determined (with TensorBoard for a TensorBoard row) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in names:
            counted = f"{name}#instructions"
            base = {
                s: self.median(counted, s, "instructions_per_step")
                for s in ("raw", "lightning", "determined", "determined+tb")
            }
            for system, _, failed in self.outcomes(counted):
                title = self.workloads[name].title
                if failed:
                    lines.append(f"| {title} | {LABELS[system]} | {failed} | | | | |")
                    continue
                value = self.median(counted, system, "instructions_per_step")
                other = self.median(counted, system, "other_threads_instructions_per_step")
                assert value is not None
                lines.append(
                    f"| {title} | {LABELS[system]} | {value / 1e6:.3f} "
                    f"| {'—' if other is None else f'{round(other / 1e6, 3) + 0.0:.3f}'} "
                    f"| {_ratio(value, base['raw'])} | {_ratio(value, base['lightning'])} "
                    f"| {_ratio(value, base[_determined_like(system)])} |"
                )
        return lines

    def cache_table(self) -> List[str]:
        """Per step, for each system that ran ``<workload>#cache``: instructions, simulated
        first-level instruction and data misses, last-level misses, branches and mispredicts
        (thousands), each × Determined's."""
        columns = (
            ("instructions_per_step", "k instructions"),
            ("i1_misses_per_step", "k I1 misses"),
            ("d1_misses_per_step", "k D1 misses"),
            ("ll_misses_per_step", "k LL misses"),
            ("branches_per_step", "k branches"),
            ("mispredicts_per_step", "k mispredicts"),
        )
        lines: List[str] = []
        for name in self.workloads:
            counted = f"{name}#cache"
            if not any(k[0] == counted for k in (*self.runs, *self.failures)):
                continue
            if not lines:
                lines = [
                    "| workload | system | "
                    + " | ".join(f"{c} (× Determined)" for _, c in columns)
                    + " |",
                    "|---|---|" + "---|" * len(columns),
                ]
            for system, _, failed in self.outcomes(counted):
                title = self.workloads[name].title
                if failed:
                    lines.append(
                        f"| {title} | {LABELS[system]} | {failed} |" + " |" * (len(columns) - 1)
                    )
                    continue
                cells = []
                for key, _ in columns:
                    value = self.median(counted, system, key)
                    det = self.median(counted, "determined", key)
                    cells.append(
                        "—" if value is None else f"{value / 1e3:.2f} ({_ratio(value, det)})"
                    )
                lines.append(f"| {title} | {LABELS[system]} | " + " | ".join(cells) + " |")
        return lines

    def checkpoint_table(self) -> List[str]:
        name = "checkpoint"
        if name not in self.workloads:
            return []
        raw_save = self.median(name, "raw", "save_s", _mean_list)
        raw_load = self.median(name, "raw", "load_s", _mean_list)
        lines = [
            "| system | training blocked per save, s, median (min–max) | × bare torch.save "
            "| × bare torch.save, same process | training loop s (first step → last) | fit() s "
            "| load s | × bare torch.load | peak RSS MB | state copied, MB |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for system, runs, failed in self.outcomes(name):
            label = "bare torch.save / torch.load" if system == "raw" else LABELS[system]
            if failed:
                lines.append(f"| {label} | {failed} | | | | | | | | |")
                continue
            saves = _values(runs, "save_s", _mean_list)
            loads = _values(runs, "load_s", _mean_list)
            paired = _median(_paired_save_ratios(runs))
            lines.append(
                f"| {label} | {_cell(saves, 1, 3)} | {_ratio(_median(saves), raw_save)} "
                f"| {'—' if paired is None else f'{paired:.2f}'} "
                f"| {_cell(_values(runs, 'loop_s'), 1, 2)} | {_cell(_values(runs, 'fit_s'), 1, 2)} "
                f"| {_cell(loads, 1, 3)} | {_ratio(_median(loads), raw_load)} "
                f"| {_cell(_values(runs, 'maxrss_mb'), 1, 0).split(' ')[0]} "
                f"| {_copied(system, runs)} |"
            )
            if system == "raw":
                fsync = _values(runs, "save_fsync_s", _mean_list)
                lines.append(
                    f"| torch.save + fsync | {_cell(fsync, 1, 3)} "
                    f"| {_ratio(_median(fsync), raw_save)} | | | | | | | |"
                )
        return lines

    def startup_table(self) -> List[str]:
        name = "startup"
        if name not in self.workloads:
            return []
        raw = self.median(name, "raw", "startup_s")
        lines = [
            "| system | process start → first step done, s | × raw | peak RSS MB |",
            "|---|---|---|---|",
        ]
        for system, runs, failed in self.outcomes(name):
            if failed:
                lines.append(f"| {LABELS[system]} | {failed} | | |")
                continue
            values = _values(runs, "startup_s")
            lines.append(
                f"| {LABELS[system]} | {_cell(values, 1, 2)} "
                f"| {_ratio(_median(values), raw)} "
                f"| {_cell(_values(runs, 'maxrss_mb'), 1, 0).split(' ')[0]} |"
            )
        return lines

    def import_lines(self) -> List[str]:
        runs = self.runs.get(("import", "import"), [])
        if not runs:
            reason = self.failures.get(("import", "import"), "no run")
            return [f"`import det_lightning`: not measured: {reason}"]
        torch_s = _values(runs, "torch_import_s")
        own = _values(runs, "det_lightning_import_s")
        pulled = any(r.get("lightning_imported") for r in runs)
        return [
            f"`import det_lightning` after `import torch`: {_cell(own, 1e3, 0)} ms "
            f"(`import torch` itself: {_cell(torch_s, 1e3, 0)} ms); "
            f"`lightning` imported: {'**yes**' if pulled else 'no'}."
        ]

    # ----- targets --------------------------------------------------------------------------
    def targets(self) -> List[Tuple[str, str, Optional[bool]]]:
        """(target, measured, met) for each stated target; met is None when not measured."""
        found: List[Tuple[str, str, Optional[bool]]] = []

        def ratio_target(
            label: str,
            a: Optional[float],
            b: Optional[float],
            limit: float,
            *,
            strict_less: bool = False,
        ) -> None:
            if a is None or b is None or not b:
                found.append((label, "not measured", None))
                return
            r = a / b
            met = r < limit if strict_less else r <= limit
            found.append((label, f"{r:.3f}", met))

        med = self.median
        ratio_target(
            "MLP: det_lightning / Lightning ≤ 1.05",
            med("mlp", "det_lightning", "cpu_per_step_s"),
            med("mlp", "lightning", "cpu_per_step_s"),
            1.05,
        )
        ratio_target(
            "CNN: det_lightning / Lightning ≤ 1.01",
            med("cnn", "det_lightning", "cpu_per_step_s"),
            med("cnn", "lightning", "cpu_per_step_s"),
            1.01,
        )
        ratio_target(
            "MLP: det_lightning / Determined < 1",
            med("mlp", "det_lightning", "cpu_per_step_s"),
            med("mlp", "determined", "cpu_per_step_s"),
            1.0,
            strict_less=True,
        )
        ratio_target(
            "MLP, TensorBoard on: det_lightning / Determined ≤ 1",
            med("mlp", "det_lightning+tb", "cpu_per_step_s"),
            med("mlp", "determined+tb", "cpu_per_step_s"),
            1.0,
        )
        ratio_target(
            "validation: det_lightning / Determined < 1",
            med("validation", "det_lightning", "cpu_per_step_s"),
            med("validation", "determined", "cpu_per_step_s"),
            1.0,
            strict_less=True,
        )
        ratio_target(
            "checkpoint save: det_lightning / bare torch.save ≤ 1.10",
            med("checkpoint", "det_lightning", "save_s", _mean_list),
            med("checkpoint", "raw", "save_s", _mean_list),
            1.10,
        )
        ratio_target(
            "checkpoint save: det_lightning / bare torch.save in the same process ≤ 1.10",
            _median(_paired_save_ratios(self.runs.get(("checkpoint", "det_lightning"), []))),
            1.0,
            1.10,
        )
        counted = "instructions_per_step"
        if ("mlp#instructions", "det_lightning") in self.runs:
            ratio_target(
                "MLP: det_lightning / Lightning ≤ 1.05 (instructions)",
                med("mlp#instructions", "det_lightning", counted),
                med("mlp#instructions", "lightning", counted),
                1.05,
            )
            ratio_target(
                "MLP: det_lightning / Determined < 1 (instructions)",
                med("mlp#instructions", "det_lightning", counted),
                med("mlp#instructions", "determined", counted),
                1.0,
                strict_less=True,
            )
            ratio_target(
                "MLP, TensorBoard on: det_lightning / Determined ≤ 1 (instructions)",
                med("mlp#instructions", "det_lightning+tb", counted),
                med("mlp#instructions", "determined+tb", counted),
                1.0,
            )
        if ("validation#instructions", "det_lightning") in self.runs:
            ratio_target(
                "validation: det_lightning / Determined < 1 (instructions)",
                med("validation#instructions", "det_lightning", counted),
                med("validation#instructions", "determined", counted),
                1.0,
                strict_less=True,
            )
        own = med("import", "import", "det_lightning_import_s")
        runs = self.runs.get(("import", "import"), [])
        if own is None:
            found.append(("`import det_lightning` < 0.3 s, no lightning", "not measured", None))
        else:
            pulled = any(r.get("lightning_imported") for r in runs)
            found.append(
                (
                    "`import det_lightning` < 0.3 s, no lightning",
                    f"{own:.3f} s after torch; lightning {'imported' if pulled else 'not imported'}",
                    own < 0.3 and not pulled,
                )
            )
        return found

    def targets_table(self) -> List[str]:
        lines = ["| target | measured | met |", "|---|---|---|"]
        for label, measured, met in self.targets():
            verdict = "not measured" if met is None else ("yes" if met else "**no**")
            lines.append(f"| {label} | {measured} | {verdict} |")
        return lines

    def failure_lines(self) -> List[str]:
        return [
            f"- {w} / {LABELS.get(s, s)}: {reason}"
            for (w, s), reason in sorted(self.failures.items())
        ]
