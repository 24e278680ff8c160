"""The guide's links hold: every relative link in the README and the docs names a file that exists,
and a ``#section`` a heading of that file (GitHub's anchors), so a renamed page or heading fails
here instead of leaving a reader on a dead link. Also: every page in docs/ is in the README's index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "harness" / "README.md", ROOT / "ensembles" / "README.md",
         ROOT / "docker" / "README.md"]
_FENCED = re.compile(r"```.*?```", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchor of each heading: lowercased, punctuation dropped, spaces to '-',
    repeats numbered."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCED.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for link in _LINK.findall(_FENCED.sub("", page.read_text())):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link} (no such heading in {target.name})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(ROOT)} links to what is not there"


def test_every_doc_page_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [page.name for page in sorted((ROOT / "docs").glob("*.md"))
               if f"(docs/{page.name})" not in readme]
    assert missing == [], f"add these pages to the README's documentation index: {missing}"
