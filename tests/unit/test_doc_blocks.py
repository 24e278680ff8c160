"""The rules the docs walk (tests/integration/test_docs_pages.py) relies on: every fenced block
of README.md and docs/*.md names its language, so a command block cannot pass for text, and an
``<!-- illustrative: why -->`` marker stands right before a bash or python block and says why."""

from __future__ import annotations

import os
import subprocess
import sys
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


FAKE_MME = """#!/bin/bash
if [ "$1" = serve ]; then
  echo "ready on http://127.0.0.1:1"; echo $$ >> served.pids; exec sleep 60
fi
echo "mme $*"
"""


def _walk(tmp_path: Path, page_text: str) -> subprocess.CompletedProcess[str]:
    """The walk's script for a page, run with an ``mme`` whose serve only says it is ready."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "mme").write_text(FAKE_MME)
    (tmp_path / "bin" / "mme").chmod(0o755)
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir(exist_ok=True)
    page.write_text(page_text)
    script = doc_support.page_script(page, root=tmp_path, report_objects=False)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_walk_runs_a_page_in_one_session_and_stops_its_servers(tmp_path: Path) -> None:
    walked = _walk(tmp_path, "# Page\n\n```bash\nmme serve --x \\\n    --y   # another terminal\n"
                   "export SAID=ALARM\nmme serve --clock-scale 60\nmme deploy a\n```\n\n"
                   "```python\nimport os\nprint(os.environ['SAID'])   # ALARM\n```\n")
    assert walked.returncode == 0, walked.stderr
    assert walked.stdout.splitlines() == ["### docs/page.md:3", "mme deploy a",
                                          "### docs/page.md:11", "ALARM"]
    first, second = map(int, (tmp_path / "served.pids").read_text().split())
    assert _gone(first) and _gone(second)  # the second replaced the first; the end stops both


def test_a_python_block_that_does_not_print_what_its_comment_says_fails(tmp_path: Path) -> None:
    walked = _walk(tmp_path, "# Page\n\n```python\nstate = 'OK'\nprint(state)   # ALARM\n```\n")
    assert walked.returncode == 1
    assert "docs/page.md:3 does not print ALARM" in walked.stderr


def test_a_failing_command_or_an_illustrative_block(tmp_path: Path) -> None:
    walked = _walk(tmp_path, "# Page\n\n<!-- illustrative: placeholders -->\n```bash\n"
                   "mme deploy ./repos/v1\nfalse\n```\n\n```bash\nls no-such-folder\n```\n")
    assert walked.returncode != 0
    assert "failed: ls no-such-folder" in walked.stderr and "mme deploy" not in walked.stdout
