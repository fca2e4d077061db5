"""The benchmark command (``benchmarks/run.py --quick``) runs end to end and writes its report.

Tiny sizes, one repetition: this checks that every workload still runs under det_lightning
and the baselines it is compared with, not the numbers (a benchmark reports, it does not assert).
The benchmarks' ``main`` runs in the test's process, and the processes it starts (its workers,
``det-lightning experiment``) come from the warm launcher (``tests/fixtures/warm.py``): what is
checked is that every workload and section runs and is reported, not how an interpreter starts
(the import measurement still gets a new one; so do the start-up section's "new interpreter"
rows). The refusals (here and in ``test_benchmark_device.py``) run both scripts as commands.
"""

import importlib
import json
import pathlib
import subprocess
import sys
from types import ModuleType
from typing import Iterator

import pytest

from tests.fixtures import warm

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SYSTEMS = {
    "raw": "raw PyTorch loop",
    "lightning": "Lightning (manual optimization)",
    "det_lightning": "det_lightning",
}
WORKLOAD_ROWS = [
    "MLP 32-64-1",
    "CNN 3x32x32",
    "MLP, validation",
    "MLP, 2 processes",
    "CNN, 2 processes",
]


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``benchmarks/`` importable, its scripts starting their processes warm."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    yield


def _script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/NAME.py`` as a module, starting its processes with the warm launcher."""
    module = importlib.import_module(name)
    if name == "run":
        monkeypatch.setattr(module, "launch", warm.run)
    else:
        monkeypatch.setattr(module, "Popen", warm.Popen)
    return module


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.usefixtures("benchmarks")
def test_quick_benchmark_writes_a_report_with_every_row(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results"
    run = _script("run", monkeypatch)
    assert run.main(["--quick", "--systems", ",".join(SYSTEMS), "--out", str(out)]) == 0
    reports = list(out.glob("overhead-quick_cpu-*core_*.md"))
    assert len(reports) == 1, sorted(p.name for p in out.iterdir())
    text = reports[0].read_text()
    assert "not measured" not in text.split("## Targets")[0], text
    table_rows = [line for line in text.splitlines() if line.startswith("| ")]
    for workload in WORKLOAD_ROWS:
        for label in SYSTEMS.values():
            assert any(workload in row and f"| {label} |" in row for row in table_rows), (
                workload,
                label,
                text,
            )
    for label in ["bare torch.save / torch.load", SYSTEMS["lightning"], SYSTEMS["det_lightning"]]:
        assert any(
            row.startswith(f"| {label} |")
            for row in text.split("## Checkpoint")[1].split("## Start-up")[0].splitlines()
        ), (label, text)
    assert "`import det_lightning` after `import torch`" in text
    assert "`lightning` imported: no" in text
    results = json.loads(reports[0].with_suffix(".json").read_text())
    assert {r["system"] for r in results} == {*SYSTEMS, "import"}


@pytest.mark.slow
@pytest.mark.usefixtures("benchmarks")
def test_search_benchmark_quick_writes_every_section(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results"
    _script("search", monkeypatch).main(["--quick", "--out", str(out)])
    [report] = out.glob("search-quick_cpu-*core_*.md")
    sections = {  # each section's table rows, without the header
        part.split("\n")[0]: [line for line in part.splitlines() if line.startswith("| ")][1:]
        for part in report.read_text().split("## ")[1:]
    }
    asha = sections["adaptive_asha against a sequential search"]
    assert [row.split(" | ")[0] for row in asha] == [
        "| sequential (random, full length)",
        "| asha, 1 worker",
    ]  # --quick: 1 worker
    assert all(int(row.split(" | ")[2]) > 0 for row in asha)  # batches were trained
    workers = [row.split(" | ")[:2] for row in sections["Workers and storages"]]
    assert workers == [["| journal file", "2"], ["| PostgreSQL", "-"]], report.read_text()
    assert [row.split(" | ")[0] for row in sections["Storage cost per trial"]] == [
        "| journal file",
        "| PostgreSQL",
    ]
    [takeover] = sections["Takeover after a worker's death"]
    assert all(float(cell) > 0 for cell in takeover.strip("| ").split(" | "))
    startup = [row.split(" | ")[:2] for row in sections["Trial start-up"]]
    assert startup == [
        ["| model_def", "forked from the warm template"],
        ["| model_def", "new interpreter"],
        ["| command", "forked from the warm template"],
        ["| command", "new interpreter"],
    ]


@pytest.mark.slow
@pytest.mark.usefixtures("benchmarks")
def test_search_benchmark_runs_only_the_sections_named(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results"
    _script("search", monkeypatch).main(["--quick", "--sections", "storage", "--out", str(out)])
    [report] = out.glob("search-quick-storage_cpu-*core_*.md")
    text = report.read_text()
    assert [part.split("\n")[0] for part in text.split("## ")[1:]] == ["Storage cost per trial"], (
        text
    )
    assert "--sections storage" in text


def test_search_benchmark_refuses_an_unknown_section(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "search.py"), "--sections", "startup,asah"]
        + ["--out", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "unknown section(s) asah" in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()  # nothing ran, nothing written
