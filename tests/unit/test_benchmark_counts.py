"""``benchmarks/run.py --instructions/--cache``: reading callgrind's dumps and the per-step
counts (valgrind itself is too slow for a unit test; the dump format is callgrind's own)."""

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


def _dump(path: pathlib.Path, tag: str, totals: str) -> None:
    # The header callgrind writes with --cache-sim=yes --branch-sim=yes, then a function's costs.
    path.write_text(
        "version: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: python worker.py\npart: 1\n\n"
        f"desc: I1 cache: 32768 B, 64 B, 8-way associative\ndesc: Trigger: Client Request: {tag}\n\n"
        "positions: line\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\n"
        f"summary: {totals}\n\nfl=(1) a.c\nfn=(1) main\n0 1 2 3\n"
    )


def test_cache_counts_per_step_from_two_dumps(run: object, tmp_path: pathlib.Path) -> None:
    _dump(tmp_path / "cg.7.1", "steps100", "1000 9 9 5 6 7 1 2 3 100 10 20 2")
    _dump(tmp_path / "cg.7.2", "steps600", "6000 9 9 55 66 77 11 22 33 600 60 120 12")
    counts = run._callgrind_counts(tmp_path)  # type: ignore[attr-defined]
    assert counts["steps600"]["D1mw"] == 77 and counts["steps100"]["Ir"] == 1000
    per_step = run.per_step(counts, (100, 600), run.CACHE_EVENTS)  # type: ignore[attr-defined]
    assert per_step == {
        "instructions_per_step": 10.0,
        "i1_misses_per_step": 0.1,
        "d1_misses_per_step": (60 + 70) / 500,
        "ll_misses_per_step": (10 + 20 + 30) / 500,
        "branches_per_step": (500 + 100) / 500,
        "mispredicts_per_step": (50 + 10) / 500,
    }


def test_an_instructions_only_dump_still_reads(run: object, tmp_path: pathlib.Path) -> None:
    """Without the simulation, callgrind's only event is Ir (what --instructions reads)."""
    (tmp_path / "cg.7.1").write_text(
        "desc: Trigger: Client Request: steps10\nevents: Ir\nsummary: 123\n"
    )
    assert run._callgrind_counts(tmp_path) == {"steps10": {"Ir": 123}}  # type: ignore[attr-defined]


def test_run_py_examples(run: object) -> None:
    assert doctest.testmod(run).failed == 0  # type: ignore[arg-type]
