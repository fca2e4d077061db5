"""``benchmarks/run.py --instructions/--cache``: reading callgrind's per-thread files and the
per-step counts (valgrind itself is too slow for a unit test; the file format is callgrind's
own, as written with ``--separate-threads=yes``)."""

import doctest
import importlib
import pathlib
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def run() -> object:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("run")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _thread_file(path: pathlib.Path, thread: int, totals: str, pid: int = 7) -> None:
    # What callgrind writes at a process's end with --separate-threads=yes --cache-sim=yes
    # --branch-sim=yes: one file per thread, then a function's costs.
    path.write_text(
        f"version: 1\ncreator: callgrind-3.19.0\npid: {pid}\ncmd: python worker.py\npart: 1\n"
        f"thread: {thread}\n\ndesc: I1 cache: 32768 B, 64 B, 8-way associative\n"
        "desc: Trigger: Program termination\n\npositions: line\n"
        "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\n"
        f"summary: {totals}\n\nfl=(1) a.c\nfn=(1) main\n0 1 2 3\n"
    )


def test_cache_counts_per_step_from_two_whole_processes(
    run: object, tmp_path: pathlib.Path
) -> None:
    few, many = tmp_path / "few", tmp_path / "many"
    few.mkdir()
    many.mkdir()
    _thread_file(few / "cg.7-01", 1, "1000 9 9 5 6 7 1 2 3 100 10 20 2")
    _thread_file(many / "cg.8-01", 1, "5000 9 9 45 56 67 11 22 33 500 60 120 12", pid=8)
    # A thread the 600-step process has: its work counts, in the total and apart.
    _thread_file(many / "cg.8-02", 2, "1000 0 0 10 10 10 0 0 0 100 0 0 0", pid=8)
    # Another process's file (a forked child) in the same directory is not read.
    _thread_file(many / "cg.9-01", 1, "999999 0 0 0 0 0 0 0 0 0 0 0 0", pid=9)
    counts = {100: run._callgrind_counts(few, 7), 600: run._callgrind_counts(many, 8)}  # type: ignore[attr-defined]
    assert counts[600] is not None and counts[600][2]["Ir"] == 1000
    per_step = run.per_step(counts, (100, 600), run.CACHE_EVENTS)  # type: ignore[attr-defined]
    assert per_step["instructions_per_step"] == 10.0
    assert per_step["other_threads_instructions_per_step"] == 2.0
    assert per_step["i1_misses_per_step"] == 0.1
    assert per_step["d1_misses_per_step"] == (60 + 70) / 500
    assert per_step["ll_misses_per_step"] == (10 + 20 + 30) / 500
    assert per_step["branches_per_step"] == (500 + 100) / 500
    assert per_step["mispredicts_per_step"] == (50 + 10) / 500


def test_an_instructions_only_file_still_reads(run: object, tmp_path: pathlib.Path) -> None:
    """Without the simulation, callgrind's only event is Ir (what --instructions reads)."""
    (tmp_path / "cg.7-01").write_text("pid: 7\nthread: 1\nevents: Ir\nsummary: 123\n")
    assert run._callgrind_counts(tmp_path, 7) == {1: {"Ir": 123}}  # type: ignore[attr-defined]


def test_a_process_without_its_main_thread_file_has_no_counts(
    run: object, tmp_path: pathlib.Path
) -> None:
    """Killed before its end, callgrind writes only an empty file: no count, not zero."""
    (tmp_path / "cg.7").write_text("")
    assert run._callgrind_counts(tmp_path, 7) is None  # type: ignore[attr-defined]


def test_run_py_examples(run: object) -> None:
    assert doctest.testmod(run).failed == 0  # type: ignore[arg-type]


def test_report_py_examples(run: object) -> None:
    assert doctest.testmod(importlib.import_module("report")).failed == 0
