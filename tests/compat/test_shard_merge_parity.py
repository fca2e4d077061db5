"""How several ranks' metadata and files merge into one checkpoint (``shard=True``), against
Determined 0.38.1's ``merge_metadata`` and ``merge_resources``: the same result and the same
conflicts on every case of its docstring's tables, and on random ones."""

import random
from typing import Any, Dict, List

import pytest
from determined.core import _checkpoint as theirs

from det_lightning.core import _shards as ours

pytestmark = pytest.mark.interop

# Determined's table (core/_checkpoint.py, merge_metadata), and nested cases around it.
METADATA_CASES: List[List[Dict[str, Any]]] = [
    [{"a": 1}, {"b": 2}],
    [{"a": 1}, {"a": 1}],
    [{"a": [1]}, {"a": [2]}],
    [{"a": [1]}, {"a": [1]}],
    [{"a": []}, {"a": 1}],
    [{"a": []}, {"a": {"c": 1}}],
    [{"a": {"c": 1}}, {"a": {"d": 1}}],
    [{"a": {"c": 1}}, {"a": 1}],
    [{"a": 1}, {"a": 1}, {"a": 2}, {"a": 3}],
    [{"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 2, "d": 1}}}, {"a": {"b": 5}}],
    [{}, {"steps_completed": 3}, {}],
    [{"x": None}, {"x": None}, {"x": 0}],
]

RESOURCE_CASES: List[List[Dict[str, int]]] = [
    [{"a/": 0}, {"a/": 0}],  # dir, dir
    [{"a/": 0, "a/x": 1}, {"a": 3}],  # dir, file
    [{"a": 1}, {"a": 1}],  # file, file
    [{"a": 1, "b/": 0, "b/c": 2}, {"b/": 0, "b/d": 2}, {"b/c": 2, "e": 1}],
    [{}, {"x": 1}, {}],
]


@pytest.mark.parametrize("case", METADATA_CASES, ids=str)
def test_metadata_merges_as_determined_merges_it(case: List[Dict[str, Any]]) -> None:
    assert ours.merge_metadata(case) == theirs.merge_metadata(case)


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=str)
def test_files_merge_as_determined_merges_them(case: List[Dict[str, int]]) -> None:
    assert ours.merge_resources(case) == theirs.merge_resources(case)


def _random_metadata(rng: random.Random, depth: int = 0) -> Dict[str, Any]:
    keys = rng.sample(["a", "b", "c"], rng.randint(0, 3))
    choices = [1, 2, [1], None, "s"] + ([{}] if depth > 1 else ["nest", "nest"])
    out: Dict[str, Any] = {}
    for key in keys:
        value = rng.choice(choices)
        out[key] = _random_metadata(rng, depth + 1) if value == "nest" else value
    return out


def test_random_metadata_merges_as_determined_merges_it() -> None:
    rng = random.Random(0)
    conflicting = 0
    for _ in range(500):
        case = [_random_metadata(rng) for _ in range(rng.randint(1, 4))]
        expected = theirs.merge_metadata(case)
        assert ours.merge_metadata(case) == expected, case
        conflicting += bool(expected[1])
    assert 50 < conflicting < 450  # both kinds of case were drawn
