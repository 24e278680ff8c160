"""The README's quick start, run as written in an empty folder, as a new user would.

Run in a folder holding only ``.venv`` (this checkout's), with HOME pointed inside it, so nothing
built or cached earlier helps (tests/walk_support.py). The quick start, the first deploy, ``mme
package`` and harness/README.md's load test are checked for what they print. Substitutions keep
it safe and fast, and nothing else is changed: the port 8080 becomes a free one (another server
may hold it on a shared machine), and the load test's phases last seconds instead of minutes.
Skipped: ``make setup`` (the venv exists). Every other block of the docs runs in
``test_docs_pages.py``; the plugin's example is walked from its own docstring by
``test_plugin_as_documented.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.processes import free_port, stop_process
from tests.support import wait_until
from tests.walk_support import ROOT, Walk, tagged_processes

# Minutes on one worker (an ensemble built as a user would): started first, it cannot end the
# run.
pytestmark = [pytest.mark.slow, pytest.mark.starts_first]


def blocks(markdown: Path, heading: str) -> list[tuple[str, str]]:
    """(language, code) of the fenced blocks between ``heading`` and the next heading of its
    level."""
    text = markdown.read_text()
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    following = re.search(rf"\n{level} ", text[start + len(heading) + 2:])
    section = text[start: start + len(heading) + 2 + following.start()] if following else text
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def commands(code: str) -> list[str]:
    """The command lines of a bash block: continuations joined, comments dropped."""
    joined = code.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    walk = Walk.fresh(tmp_path_factory.mktemp("fresh-checkout"), free_port())
    yield walk
    # The quick start's server (stopped by its fixture, which ends first) and every command
    # of the quick start's tests: none may be left.
    wait_until(lambda: not tagged_processes(walk.tag), 60, "the quick start's processes to stop")
    print(f"quick start: processes left {tagged_processes(walk.tag)}")


@pytest.fixture(scope="module")
def quickstart(walk: Walk) -> Iterator[Walk]:
    """The quick start's bash block: build, copy, and ``mme serve`` left running."""
    (_, code), *_ = blocks(ROOT / "README.md", "## Quickstart")
    lines = [c for c in commands(code) if not c.startswith("make setup")]
    *setup, serve = lines
    assert serve.startswith(".venv/bin/mme serve ") and "--port 8080" in serve
    for line in setup:
        walk.run(line)
    assert (walk.folder / "models" / "text_embedding.tar.gz").is_file()
    for _ in range(3):  # a port picked while the build ran may be taken by then: pick again
        walk.port = free_port()
        log = (walk.folder / "serve.log").open("w")
        server = subprocess.Popen(["bash", "-c", "exec " + walk.text(serve)], cwd=walk.folder,
                                  env=walk.env, stdout=log, stderr=subprocess.STDOUT)

        def ready(server: subprocess.Popen[bytes] = server) -> bool:
            return "ready on" in (walk.folder / "serve.log").read_text() \
                or server.poll() is not None

        wait_until(ready, 180, "mme serve to say it is ready")
        if server.poll() is None or "is in use" not in (walk.folder / "serve.log").read_text():
            break
        log.close()
    try:
        assert server.poll() is None, (walk.folder / "serve.log").read_text()
        yield walk
    finally:
        stop_process(server)
        log.close()
    assert server.returncode == 0


def test_quickstart_python_prints_what_its_comment_says(quickstart: Walk) -> None:
    served = (quickstart.folder / "serve.log").read_text()
    assert f"live page http://127.0.0.1:{quickstart.port}/_emulator/" in served
    (_, code) = blocks(ROOT / "README.md", "## Quickstart")[1]
    expected = re.search(r"#\s*(.+)$", code.strip().splitlines()[-1])
    assert expected is not None
    (quickstart.folder / "quickstart.py").write_text(quickstart.text(code))
    printed = quickstart.run(f"{sys.executable} quickstart.py")
    assert printed.strip() == expected.group(1).strip()


def test_deploy_local_in_one_command(quickstart: Walk) -> None:
    (_, code), *_ = blocks(ROOT / "README.md", "### Deploy to it as to SageMaker")
    (line,) = commands(code)
    # The README's server is on 8080, where mme deploy looks; ours is elsewhere (see above)
    printed = quickstart.run(line, MME_EMULATOR_URL=f"http://127.0.0.1:{quickstart.port}")
    assert "smoke text_embedding.tar.gz: ok" in printed
    assert "endpoint demo: created; ModelDataUrl file://" in printed


def test_package_prints_what_it_wrote(quickstart: Walk) -> None:
    printed = quickstart.run(".venv/bin/mme package build/text_embedding -o x.tar.gz")
    assert re.fullmatch(r"wrote x\.tar\.gz \(\d+\.\d MiB, layout flat\)\n", printed), printed


def test_the_harness_readme_load_test(quickstart: Walk) -> None:
    (_, code), *_ = blocks(ROOT / "harness" / "README.md", "## `mme loadtest`")
    line = next(c for c in commands(code) if "--model-data models/" in c)
    short = re.sub(r"(--phase \d+:\d+:)\d+", r"\g<1>4", line)  # seconds, not minutes
    printed = quickstart.run(short)
    assert "| stop reason |" in printed and "report: report/report.json" in printed
    report = json.loads((quickstart.folder / "report" / "report.json").read_text())
    assert report["successes"] > 0 and report["errors_by_code"] == {}
    assert not report["stop_reason"].startswith(("aborted", "interrupted"))
    with urllib.request.urlopen(f"http://127.0.0.1:{quickstart.port}/ping", timeout=5) as r:
        assert r.status == 200  # the quick start's server was not disturbed by the load test's
