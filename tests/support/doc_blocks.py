"""The command blocks of README.md and the guide (``docs/``), as the tests read them.

Every fenced ``bash`` or ``python`` block is preceded by one marker line that says how the suite
checks it (an HTML comment: invisible on GitHub and in the built site):

- ``<!-- cmd: run -->``: executed as written, in an empty folder, offline
  (``tests/docs/test_doc_commands.py``);
- ``<!-- cmd: parse -->``: checked without running: each ``uv run certbench ...`` line is parsed
  by the command's own click parser (unknown options, bad values and, unless the line elides
  arguments with ``...``, missing required options fail); ``curl`` URLs must be routes of the
  REST API; ``uv run python SCRIPT`` scripts must exist and define the options used; Python
  blocks must compile and their imports resolve;
- ``<!-- cmd: first-run -->``: the README's first submission, run against a real
  ``certbench serve`` by ``tests/e2e/test_e2e_first_run.py`` (and parsed like ``parse``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
KINDS = ("run", "parse", "first-run")
#: Fences that hold commands or code a reader would run.
COMMAND_LANGUAGES = ("bash", "sh", "shell", "console", "python", "py", "pycon")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
#: The first line of a bare fence that makes it a shell block.
SHELL_START = re.compile(r"\A\s*(?:\$ )?(?:uv |certbench |curl |bash |python3? |export )")
MARKER = re.compile(r"<!--\s*cmd:\s*([\w-]+)\s*-->\s*\Z")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document: where it is, its language, its marker (None: unmarked)."""

    path: Path
    line: int
    language: str
    kind: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    """README.md and every page source of the guide."""
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)
    return [README, *pages]


def blocks(path: Path) -> list[Block]:
    """The command blocks of one document, with their markers: fences in ``COMMAND_LANGUAGES``,
    and unlabelled fences that hold shell commands (so a command cannot dodge the checks by
    leaving its fence bare)."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        language = match.group(1).lower()
        if not language and SHELL_START.search(match.group(2)):
            language = "bash"
        if language not in COMMAND_LANGUAGES:
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        found.append(
            Block(
                path=path,
                line=text.count("\n", 0, match.start()) + 1,
                language=language,
                kind=marker.group(1) if marker else None,
                text=match.group(2),
            )
        )
    return found


def all_blocks() -> list[Block]:
    return [block for path in documents() for block in blocks(path)]


def command_lines(text: str) -> list[list[str]]:
    """A shell block as argv lists: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def first_run_block() -> Block:
    """The README's first-submission block (exactly one)."""
    found = [b for b in blocks(README) if b.kind == "first-run"]
    assert len(found) == 1, f"README.md needs exactly one first-run block, has {len(found)}"
    return found[0]
