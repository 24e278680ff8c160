"""The rules the docs walk (tests/integration/test_readme_walk.py) relies on: every fenced block
of README.md and docs/*.md names its language, so a command block cannot pass for text, and an
``<!-- illustrative: why -->`` marker stands right before a bash or python block and says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import doc_support

PAGES = doc_support.pages()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_fence_names_its_language(page: Path) -> None:
    unnamed = [block.where for block in doc_support.blocks(page) if not block.language]
    assert unnamed == [], "name the language (bash, python, text, ...) of the blocks at " \
                          f"{unnamed}: bash and python blocks run in the docs walk"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_illustrative_markers_stand_before_a_runnable_block(page: Path) -> None:
    marked = [block for block in doc_support.blocks(page) if block.illustrative]
    assert all(block.language in doc_support.RUNNABLE for block in marked), \
        [block.where for block in marked]
    markers = len(doc_support.ILLUSTRATIVE.findall(page.read_text()))
    assert markers == len(marked), f"{page.name}: a marker not right before a fence"


def test_a_marked_block_is_read_as_illustrative_and_the_rest_as_runnable(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n```bash\n# a comment, no heading\nmme serve\n```\n\n"
                    "## On AWS\n<!-- illustrative: real AWS -->\n```bash\nmme deploy --target aws\n"
                    "```\n\n```text\nout\n```\n")
    found = doc_support.blocks(page, root=tmp_path)
    assert [(b.line, b.language, b.heading, b.illustrative, b.runs) for b in found] == [
        (3, "bash", "# Title", None, True),
        (10, "bash", "## On AWS", "real AWS", False),
        (14, "text", "## On AWS", None, False)]


def test_logical_lines_join_continuations_and_drop_comments() -> None:
    code = "mme deploy a \\\n    --traffic canary   # a comment\n# only a comment\n\nmme x\n"
    assert doc_support.logical_lines(code) == ["mme deploy a --traffic canary", "mme x"]
