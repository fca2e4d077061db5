"""Every code block of the README and the docs site is true: it parses, and it runs.

A fenced block is run unless the line before it is ``<!-- illustration-only: why -->`` (a SLURM
script, a server that runs until stopped: kept few); ``<!-- file: NAME -->`` writes the block to
NAME for the blocks after it. A page's runnable blocks run in order, in a copy of
``examples/mnist``: ``python`` blocks with this interpreter, ``bash`` blocks with ``bash -e``
and this environment's ``python`` and ``det-lightning`` first on ``PATH``. Both kinds start
their Python processes forked from the warm launcher (``tests/fixtures/warm.py``; the commands
on ``PATH`` are ``tests/fixtures/warm_client.py``'s): a page's subject is what its commands
print and write, not the interpreter's start.
"""

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

import pytest
import yaml

from tests.fixtures import warm, warm_client

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "_build" not in p.parts]
LANGUAGES = ("python", "bash", "yaml", "text", "")  # "": a plain fence, a picture (as text)
MAX_ILLUSTRATIONS = 15  # across README and docs; each names why it cannot run
README_MAX_LINES = 300
_FENCE = re.compile(r"^```(\{?[A-Za-z-]*\}?)")
_MARKER = re.compile(r"^<!-- (illustration-only|file): *(.+?) *-->$")
TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: pathlib.Path
    line: int
    language: str
    text: str
    marker: Optional[str]  # "illustration-only" or "file"
    argument: str  # the reason, or the file name

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: pathlib.Path) -> List[Block]:
    """The page's fenced code blocks; MyST directives (```{toctree}) are not code."""
    lines = page.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        previous = lines[index - 1] if index else ""
        marker = _MARKER.match(previous)
        if fence.group(1).startswith("{"):  # a MyST directive: its body is not code
            index = end + 1
            continue
        found.append(
            Block(
                page=page,
                line=index + 1,
                language=fence.group(1),
                text="\n".join(lines[index + 1 : end]) + "\n",
                marker=marker.group(1) if marker else None,
                argument=marker.group(2) if marker else "",
            )
        )
        index = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


def _runnable(block: Block) -> bool:
    return block.marker != "illustration-only" and block.language in ("python", "bash")


def test_every_block_names_a_known_language() -> None:
    unlabelled = [b.where() for b in ALL_BLOCKS if b.language not in LANGUAGES]
    assert not unlabelled, f"label these blocks with one of {LANGUAGES[:-1]}: {unlabelled}"


def test_illustrations_are_few_and_say_why() -> None:
    illustrations = [b for b in ALL_BLOCKS if b.marker == "illustration-only"]
    assert all(b.argument for b in illustrations)
    assert len(illustrations) <= MAX_ILLUSTRATIONS, [b.where() for b in illustrations]
    assert sum(_runnable(b) for b in ALL_BLOCKS) >= 10  # most blocks run


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=Block.where)
def test_every_block_parses(block: Block) -> None:
    if block.language == "python":
        compile(block.text, block.where(), "exec")
    elif block.language == "yaml":
        yaml.safe_load(block.text)
    elif block.language == "bash":
        result = subprocess.run(["bash", "-n", "-c", block.text], capture_output=True, text=True)
        assert result.returncode == 0, f"{block.where()}: {result.stderr}"


def test_the_readme_is_a_users_readme() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "the README names a date"
    assert "## Development" in text and "docs/contributing.md" in text
    assert "bash scripts/test.sh" in text  # the command .ci/run calls
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / link).is_file(), f"the README links to a missing page: {link}"


def _environment(commands: pathlib.Path) -> Dict[str, str]:
    """``commands``: a folder for the warm ``python`` and ``det-lightning``, first on ``PATH``
    (where the warm launcher is off, this environment's own)."""
    bin_dir = str(pathlib.Path(sys.executable).parent)
    if warm.enabled():
        bin_dir = f"{warm_client.commands(commands, warm.socket_path())}{os.pathsep}{bin_dir}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_LIGHTNING_")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        OMP_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _run(block: Block, cwd: pathlib.Path, env: Dict[str, str]) -> None:
    if block.language == "python":
        argv = [sys.executable, "-c", block.text]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    result = warm.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, (
        f"{block.where()} exited {result.returncode} (in a copy of examples/mnist; a block that "
        f"cannot run there is marked <!-- illustration-only: why -->)\n{block.text}\n"
        f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-6000:]}"
    )


PAGES_THAT_RUN = [p for p in PAGES if any(_runnable(b) for b in blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_THAT_RUN, ids=lambda p: str(p.relative_to(REPO)))
def test_the_page_runs(page: pathlib.Path, tmp_path: pathlib.Path) -> None:
    work = tmp_path / "mnist"
    shutil.copytree(REPO / "examples" / "mnist", work)
    env = _environment(tmp_path / "bin")
    for block in blocks(page):
        if block.marker == "file":
            (work / block.argument).write_text(block.text)
        elif _runnable(block):
            _run(block, work, env)
