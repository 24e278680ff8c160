"""The docs' command blocks, run as written in an empty folder, as a new user would.

The blocks are read from README.md, docs/*.md and harness/README.md at test time, so a doc that
drifts from what works fails here. Run in a folder holding only ``.venv`` (this checkout's), with
HOME pointed inside it, so nothing built or cached earlier helps. The quick start, the first
deploy, ``mme package`` and harness/README.md's load test have tests of their own below, which
check what they print; every other bash and python block of README.md and docs/*.md that is not
marked ``<!-- illustrative: why -->`` runs in ``test_every_block_of_the_page_runs_as_written``,
page by page (tests/README.md, tests/doc_support.py). Substitutions keep it safe and fast, and
nothing else is changed: the ports 8080 and 9000 become free ones (another server may hold them
on a shared machine), and the load test's phases last seconds instead of minutes. Skipped:
``make setup`` (the venv exists). The plugin's example is walked from its own docstring by
``test_plugin_as_documented.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.processes import free_port, stop_process
from tests import doc_support
from tests.support import wait_until

# Minutes on one worker (its quick start is built once): started first, it cannot end the run.
pytestmark = [pytest.mark.slow, pytest.mark.starts_first]

ROOT = Path(__file__).parents[2]
TIMEOUT_S = 600  # a build, a server start, a load test: each well under this
TAG = "DOCS_WALK_TAG"  # in the environment of every process the walk starts


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


class Walk:
    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MME_", "AWS_"))}
        self.env.update(HOME=str(folder / "home"),
                        PATH=f"{folder / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
        self.env[TAG] = self.tag = f"{folder.name}-{os.getpid()}"  # on every process it starts

    def text(self, code: str) -> str:
        return code.replace("8080", str(self.port))

    def run(self, line: str, **env: str) -> str:
        done = subprocess.run(["bash", "-c", self.text(line)], cwd=self.folder,
                              env={**self.env, **env}, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{line}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    folder = tmp_path_factory.mktemp("fresh-checkout")
    (folder / ".venv").symlink_to(ROOT / ".venv")
    (folder / "home").mkdir()
    walk = Walk(folder, free_port())
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


# Every other block of README.md and docs/*.md that a reader can run: each page as one shell
# session (tests/doc_support.py page_script) in a folder of its own, after the quick start (its
# build/ and models/ copied in). MME_PORT and MME_EMULATOR_URL name the free port that replaces
# 8080 to the commands that read them.


def tagged_processes(tag: str) -> list[str]:
    """The processes (pid and command line) started by a page: they carry its tag."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if f"{TAG}={tag}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(f"{proc.name} {(proc / 'cmdline').read_bytes()!r}")
        except OSError:  # gone, or not ours
            continue
    return found


def tree(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


@pytest.fixture(scope="module")
def docs_walk(quickstart: Walk, tmp_path_factory: pytest.TempPathFactory) -> Walk:
    """A folder where the quick start was done: its build/ and models/, an empty home and tmp."""
    folder = tmp_path_factory.mktemp("docs-walk")
    (folder / ".venv").symlink_to(ROOT / ".venv")
    for name in ("home", "tmp"):
        (folder / name).mkdir()
    for name in ("build", "models"):
        shutil.copytree(quickstart.folder / name, folder / name)
    return Walk(folder, free_port())


@pytest.mark.parametrize("page", doc_support.walked_pages())
def test_every_block_of_the_page_runs_as_written(docs_walk: Walk, page: str) -> None:
    tag = f"{page}-{os.getpid()}"  # this page's own, in place of the folder's
    home, tmp = docs_walk.folder / "home", docs_walk.folder / "tmp"
    before = {"processes": tagged_processes(tag), "home": tree(home), "tmp": tree(tmp)}
    env = {**docs_walk.env, TAG: tag, "TMPDIR": str(tmp), "MME_PORT": str(docs_walk.port),
           "MME_EMULATOR_URL": f"http://127.0.0.1:{docs_walk.port}"}
    script = doc_support.page_script(ROOT / page).replace("8080", str(docs_walk.port)).replace(
        "9000", str(free_port()))
    done = subprocess.run(["bash", "-c", script], cwd=docs_walk.folder, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    wait_until(lambda: not tagged_processes(tag), 60, f"every process {page} started to stop")
    after = {"processes": tagged_processes(tag), "home": tree(home), "tmp": tree(tmp)}
    held = re.findall(r"^AWS objects left: (.+)$", done.stdout, re.M)
    new = {f"{name}/{path}" for name in ("home", "tmp") for path in after[name] - before[name]}
    print(f"{page}: processes before {before['processes']}, after {after['processes']}; "
          f"new under HOME and TMPDIR: {sorted(new)}; {held}")
    assert after["processes"] == [], after["processes"]
    assert [path for path in new if not kept(path)] == []
    assert (docs_walk.folder / "home" / STORE).is_dir() is False or not any(
        path.is_file() for path in (docs_walk.folder / "home" / STORE).rglob("*"))
    for objects in map(json.loads, held):
        assert {kind: names for kind, names in objects.items() if names and kind != "unreadable"} \
            == {}, objects


def kept(path: str) -> bool:
    """A path that may stay: under one of KEPT, or a folder that holds one."""
    return path.startswith(KEPT) or any(prefix.startswith(f"{path}/") for prefix in KEPT)


STORE = ".cache/sagemaker-mme-emulator-models"
# What may stay after a page, and why: nothing a page made but caches and the empty bucket.
KEPT = (
    "home/.cache/sagemaker-mme-emulator",  # mme serve's cache folder (the disk cache, the state)
    f"home/{STORE}",  # mme deploy's local store, the bucket: teardown empties it (checked above)
    "home/.cache/matplotlib", "home/.config/matplotlib",  # matplotlib's font cache (mme plan)
    "home/.cache/Microsoft", "tmp/.ses",  # onnxruntime's session files
    "tmp/pytest-of-",  # pytest's base temporary folder: it keeps the last three
)
