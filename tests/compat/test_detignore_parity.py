"""``.detignore`` patterns match what Determined's matcher (pathspec's gitwildmatch) matches."""

from typing import List

import pathspec
import pytest

from det_lightning.pytorch._detignore import DetIgnore

PATTERNS: List[List[str]] = [
    ["data/"],
    ["*.bin", "!keep.bin"],
    ["/build"],
    ["docs/*.md"],
    ["logs/**/keep.txt"],
    ["**/cache"],
    ["a/**"],
    ["*.py[co]"],
    ["file?.txt"],
    ["# comment", "", "out"],
    ["dir/", "!dir/"],
    ["nested/deep/"],
    ["*"],
    ["*.txt", "!important/*.txt"],
]
PATHS = [
    ("data", True),
    ("data", False),
    ("src/data", True),
    ("src/data/x.csv", False),
    ("w.bin", False),
    ("a/keep.bin", False),
    ("build", True),
    ("src/build", True),
    ("docs/a.md", False),
    ("docs/sub/a.md", False),
    ("logs/keep.txt", False),
    ("logs/x/y/keep.txt", False),
    ("cache", True),
    ("x/cache", True),
    ("a/b/c", False),
    ("m.pyc", False),
    ("m.py", False),
    ("file1.txt", False),
    ("file12.txt", False),
    ("out", False),
    ("x/out", True),
    ("dir", True),
    ("nested/deep", True),
    ("nested/deep/f", False),
    ("important/a.txt", False),
    ("b.txt", False),
]


@pytest.mark.parametrize("patterns", PATTERNS, ids=lambda p: "|".join(p))
def test_matches_like_determineds_pathspec(patterns: List[str]) -> None:
    theirs = pathspec.PathSpec.from_lines(pathspec.patterns.GitWildMatchPattern, patterns)
    ours = DetIgnore(patterns)
    for path, is_dir in PATHS:
        # Determined's copy asks with a trailing "/" for directories, and without.
        expected = theirs.match_file(path) or (is_dir and theirs.match_file(path + "/"))
        parts = path.split("/")
        for depth in range(1, len(parts)):  # shutil.copytree never enters an ignored directory
            parent = "/".join(parts[:depth])
            expected = expected or theirs.match_file(parent) or theirs.match_file(parent + "/")
        assert ours.ignored(path, is_dir) == expected, (patterns, path, is_dir)
