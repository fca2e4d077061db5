"""The ``searcher`` section typed once (``_runner/config/_searcher.py``): its defaults, what the
runner builds from it, and no reader of the raw section outside ``config/``."""

import ast
import pathlib
from typing import List

import pytest

from det_lightning._runner.config import load_config
from det_lightning._runner.config._searcher import SearcherConfig

RUNNER = pathlib.Path(__file__).resolve().parents[2] / "det_lightning" / "_runner"


def _write(tmp_path: pathlib.Path, searcher: str) -> pathlib.Path:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "entrypoint: model_def:Trial\nhyperparameters: {global_batch_size: 8}\n"
        f"searcher: {searcher}\n"
    )
    return path


def test_defaults_are_stated_once_and_read_from_the_typed_section(tmp_path: pathlib.Path) -> None:
    config = load_config(_write(tmp_path, "{name: single, metric: loss, max_length: {batches: 4}}"))
    searcher = config.searcher_config
    assert searcher == SearcherConfig(name="single", metric="loss")
    assert (searcher.smaller_is_better, searcher.max_concurrent_trials) == (True, 16)
    assert config.searcher_config is searcher  # built once
    with pytest.raises(AttributeError):
        searcher.metric = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        SearcherConfig("single", "loss")  # type: ignore[misc]  # keyword-only


def test_an_asha_section_keeps_what_was_given(tmp_path: pathlib.Path) -> None:
    config = load_config(
        _write(
            tmp_path,
            "{name: adaptive_asha, metric: acc, smaller_is_better: false, max_trials: 8, "
            "max_concurrent_trials: 0, divisor: 3, mode: aggressive, max_rungs: 2, "
            "time_metric: batches, max_time: 27}",
        )
    )
    assert config.searcher_config == SearcherConfig(
        name="adaptive_asha",
        metric="acc",
        smaller_is_better=False,
        max_trials=8,
        max_concurrent_trials=16,  # 0: unlimited on a cluster; locally the default
        divisor=3.0,
        mode="aggressive",
        max_rungs=2,
    )


def _raw_searcher_reads(path: pathlib.Path) -> List[str]:
    """``x.searcher[...]``, ``x.searcher.get(...)``, ``y["searcher"][...]`` and
    ``y["searcher"].get(...)``: a key of the raw section read outside ``config/``."""

    def raw_section(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == "searcher"
        return (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == "searcher"
        )

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        read = (isinstance(node, ast.Subscript) and raw_section(node.value)) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and raw_section(node.func.value)
        )
        if read:
            found.append(f"{path.relative_to(RUNNER)}:{getattr(node, 'lineno', 0)}")
    return found


def test_the_runner_reads_the_searcher_only_through_the_typed_section() -> None:
    paths = [p for p in RUNNER.rglob("*.py") if "config" not in p.relative_to(RUNNER).parts]
    assert len(paths) > 30
    found = [line for path in paths for line in _raw_searcher_reads(path)]
    assert found == [], found
    assert _raw_searcher_reads(RUNNER / "config" / "_experiment_config.py")  # it sees them
