"""The benchmark command (``benchmarks/run.py --quick``) runs end to end and writes its report.

Tiny sizes, one repetition: this checks that every workload still runs under det_lightning
and the baselines it is compared with, not the numbers (a benchmark reports, it does not assert).
"""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


@pytest.mark.slow
@pytest.mark.distributed
def test_quick_benchmark_writes_a_report_with_every_row(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run.py"),
            "--quick",
            "--systems",
            ",".join(SYSTEMS),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
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
def test_search_benchmark_quick_writes_every_section(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "search.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
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
def test_search_benchmark_runs_only_the_sections_named(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "search.py"), "--quick"]
        + ["--sections", "storage", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
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
