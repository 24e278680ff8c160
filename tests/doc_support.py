"""The fenced blocks of README.md and docs/*.md, and which of them a reader can run.

Every fence names its language (```bash, ```python, ```yaml, ```text, ...). A ``bash`` or
``python`` block is run as written by ``tests/integration/test_readme_walk.py`` unless the line
right before its fence is ``<!-- illustrative: why -->`` (real AWS, a GPU host, a Docker image,
placeholders a reader fills in, a fragment of a larger program). tests/README.md says the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
RUNNABLE = ("bash", "python")
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
ILLUSTRATIVE = re.compile(r"<!--\s*illustrative:\s*(?P<why>\S.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root: README.md, docs/alarms.md
    line: int  # of the opening fence, 1-based
    language: str  # the fence's info string's first word ('' when it names none)
    code: str
    illustrative: str | None  # the marker's reason, None for a block that runs
    heading: str  # the closest heading above the block, as written ('## Quickstart')

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and self.illustrative is None


def pages() -> list[Path]:
    """The pages whose blocks are walked: the README first, then docs/ by name."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path, root: Path = ROOT) -> list[Block]:
    text = page.read_text()
    found = []
    heading, prose_from = "", 0
    for fence in FENCE.finditer(text):
        before = text[:fence.start()]
        headings = re.findall(r"^#{1,6} .+$", text[prose_from:fence.start()], re.M)
        heading, prose_from = (headings[-1] if headings else heading), fence.end()
        previous = before.rstrip("\n").rsplit("\n", 1)[-1]
        marker = ILLUSTRATIVE.fullmatch(previous.strip())
        info = fence.group("info").strip()
        found.append(Block(page=str(page.relative_to(root)), line=before.count("\n") + 1,
                           language=info.split()[0] if info else "", code=fence.group("code"),
                           illustrative=marker.group("why") if marker else None,
                           heading=heading))
    return found


def logical_lines(code: str) -> list[str]:
    """A bash block's command lines: continuations joined, comments (whole-line, or after two
    spaces) dropped."""
    joined = code.replace("\\\n", " ")
    return [re.sub(r"\s+", " ", line.split("  #")[0]).strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
