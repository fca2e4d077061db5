"""``.detignore``: gitignore-style patterns naming what a checkpoint's ``code/`` leaves out.

Determined reads ``.detignore`` at the root of the model directory (gitignore syntax, with a few
defaults such as ``__pycache__/`` and ``*.py[co]``) when it copies code. ``DetIgnore`` is a small
matcher for that syntax, enough for what such files hold::

    # comment            blank lines and comments are skipped
    data/                a trailing "/" matches directories only
    /build               a leading "/" (or a "/" inside) anchors the pattern at the root
    *.ckpt               otherwise the pattern matches the name at any depth
    logs/**/keep.txt     "**" matches any number of directories
    !important.ckpt      "!" re-includes what an earlier pattern excluded

The last pattern that matches decides; a path inside an ignored directory is ignored.
"""

import pathlib
import re
from typing import List, NamedTuple, Optional, Sequence

DEFAULT_PATTERNS = ("__pycache__/", "*.py[co]", "*$py.class", ".git/", ".idea/", ".vscode/")


class _Rule(NamedTuple):
    regex: "re.Pattern[str]"
    negated: bool
    dirs_only: bool


def _translate(glob: str) -> str:
    """A gitignore glob (no leading "/") as a regex over a "/"-separated relative path.

    >>> matches = lambda glob, path: bool(re.fullmatch(_translate(glob), path))
    >>> matches("a/**/b", "a/x/y/b"), matches("a/**/b", "a/b"), matches("a/*", "a/x/y")
    (True, True, False)
    """
    out, i = [], 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = glob.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = glob[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif char == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 1
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _rule(line: str) -> Optional[_Rule]:
    line = line.rstrip("\n")
    if not line.strip() or line.startswith("#"):
        return None
    line = line.rstrip(" ")
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dirs_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    line = line.lstrip("/")
    body = _translate(line)
    prefix = "" if anchored else "(?:.*/)?"
    return _Rule(re.compile(f"{prefix}{body}"), negated, dirs_only)


class DetIgnore:
    """Matches relative paths against ``.detignore`` patterns.

    Args:
        lines: the patterns, one a line (Determined's defaults come first).

    >>> ignore = DetIgnore(["data/", "*.ckpt", "!keep.ckpt", "/build"])
    >>> [ignore.ignored(p, is_dir) for p, is_dir in [
    ...     ("data", True), ("data", False), ("src/data", True), ("m.ckpt", False),
    ...     ("a/keep.ckpt", False), ("build", True), ("src/build", True), ("data/x.py", False)]]
    [True, False, True, True, False, True, False, True]
    """

    def __init__(self, lines: Sequence[str]) -> None:
        self.rules: List[_Rule] = [r for r in map(_rule, lines) if r is not None]

    @classmethod
    def for_directory(cls, root: pathlib.Path) -> "DetIgnore":
        """Determined's defaults plus ``root/.detignore``, if there is one."""
        lines = list(DEFAULT_PATTERNS)
        path = root / ".detignore"
        if path.is_file():
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
        return cls(lines)

    def _matches(self, path: str, is_dir: bool) -> bool:
        ignored = False
        for rule in self.rules:
            if rule.dirs_only and not is_dir:
                continue
            if rule.regex.fullmatch(path):
                ignored = not rule.negated
        return ignored

    def ignored(self, relative: str, is_dir: bool) -> bool:
        """Whether ``relative`` ("/"-separated, from the root) is left out: it matches, or one
        of the directories above it does."""
        parts = relative.strip("/").split("/")
        for depth in range(1, len(parts)):
            if self._matches("/".join(parts[:depth]), True):
                return True
        return self._matches("/".join(parts), is_dir)
