"""Where profiled systems differ, per timed step: ``python benchmarks/profile_diff.py DIR``.

``DIR`` holds what ``BENCH_CUDA_PROFILE=DIR`` runs wrote (``cuda_window.write_profile``: one
``<system>-<workload>-<pid>.json`` per worker). For each workload, each system is compared with
the base system (``--base``, Determined by default; the newest file of each system counts): the
operations whose own host time per timed step differs most (CUDA runtime calls, such as
``cudaStreamSynchronize`` or ``cudaHostAlloc``, among them), then those whose own device time
does, each with its calls per step. The times come from profiled runs: read the differences,
not the totals, as the measurement (the profiler slows every operation alike).
"""

import argparse
import json
import pathlib
import sys
from typing import Any, Dict, List, Optional, Tuple

Row = Tuple[str, float, float, float, float]  # name, A, B, calls in A, calls in B


def newest_by_workload(folder: pathlib.Path) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """``{workload: {system: record}}`` from the folder's profiles, the newest of each pair."""
    found: Dict[Tuple[str, str], Tuple[float, Dict[str, Any]]] = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or "per_step" not in record:
            continue
        key = (str(record.get("workload")), str(record.get("system")))
        mtime = path.stat().st_mtime
        if key not in found or mtime > found[key][0]:
            found[key] = (mtime, record)
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for (workload, system), (_, record) in sorted(found.items()):
        out.setdefault(workload, {})[system] = record
    return out


def differences(a: Dict[str, Any], b: Dict[str, Any], field: str) -> List[Row]:
    """Each operation's ``field`` per step in ``a`` and ``b``, largest difference first.

    >>> a = {"per_step": [{"name": "x", "calls": 2, "t": 5.0}, {"name": "y", "calls": 1, "t": 9.0}]}
    >>> b = {"per_step": [{"name": "x", "calls": 1, "t": 1.0}, {"name": "z", "calls": 3, "t": 2.0}]}
    >>> differences(a, b, "t")
    [('y', 9.0, 0.0, 1, 0), ('x', 5.0, 1.0, 2, 1), ('z', 0.0, 2.0, 0, 3)]
    """
    rows_a = {row["name"]: row for row in a["per_step"]}
    rows_b = {row["name"]: row for row in b["per_step"]}
    rows: List[Row] = []
    for name in set(rows_a) | set(rows_b):
        ra, rb = rows_a.get(name, {}), rows_b.get(name, {})
        rows.append(
            (name, ra.get(field, 0.0), rb.get(field, 0.0), ra.get("calls", 0), rb.get("calls", 0))
        )
    return sorted(rows, key=lambda r: (-abs(r[1] - r[2]), r[0]))


def render(workload: str, a: Dict[str, Any], b: Dict[str, Any], top: int) -> List[str]:
    """The comparison of ``a`` with ``b`` (their systems named) as lines of text."""
    names = f"{a['system']} - {b['system']}"
    lines = [f"{workload}: {names}, per timed step ({a['steps']} and {b['steps']} steps)"]
    for field, label in (("self_cpu_us", "own host us"), ("self_device_us", "own device us")):
        total_a = sum(row.get(field, 0.0) for row in a["per_step"])
        total_b = sum(row.get(field, 0.0) for row in b["per_step"])
        if not total_a and not total_b:
            continue
        lines.append(
            f"  {label}: {total_a:.1f} against {total_b:.1f} ({total_a - total_b:+.1f}); "
            "the largest differences:"
        )
        lines.append(
            f"    {'operation':<48} {'A':>9} {'B':>9} {'A - B':>9} {'calls A':>8} {'B':>6}"
        )
        for name, va, vb, ca, cb in differences(a, b, field)[:top]:
            if va == vb:
                break
            lines.append(
                f"    {name[:48]:<48} {va:>9.1f} {vb:>9.1f} {va - vb:>+9.1f} {ca:>8.2f} {cb:>6.2f}"
            )
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=pathlib.Path, help="BENCH_CUDA_PROFILE's folder")
    parser.add_argument("--base", default="determined", help="the system compared with")
    parser.add_argument("--top", type=int, default=15, help="operations listed per table")
    args = parser.parse_args(argv)
    profiles = newest_by_workload(args.folder)
    if not profiles:
        print(f"profile_diff: no profiles in {args.folder}", file=sys.stderr)
        return 1
    for workload, systems in profiles.items():
        base = systems.get(args.base)
        if base is None:
            print(f"profile_diff: {workload}: no {args.base} profile to compare with")
            continue
        for system, record in systems.items():
            if system != args.base:
                print("\n".join(render(workload, record, base, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
