"""Every command block of README.md and docs/*.md, run as written, page by page, as a new user
would after the README's quick start (its own test: test_readme_walk.py).

The blocks are read from the pages at test time, so a doc that drifts from what works fails here.
Every bash and python block that is not marked ``<!-- illustrative: why -->`` runs, each page as
one shell session (tests/README.md, tests/doc_support.py ``page_script``) in a folder holding
only ``.venv``, the quick start's build/ and models/, and an empty HOME and TMPDIR
(tests/walk_support.py). Substitutions keep it safe and fast, and nothing else is changed: the
ports 8080 and 9000 become free ones, which MME_PORT and MME_EMULATOR_URL name to the commands
that read them. After each page, no process it started may be left, and nothing new under HOME
and TMPDIR but caches.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from emulator.processes import free_port
from ensembles.packaging import package
from tests import doc_support
from tests.ensemble_helpers import built_repository
from tests.support import wait_until
from tests.walk_support import ROOT, TAG, TIMEOUT_S, Walk, tagged_processes

# Minutes on one worker: started first, it cannot end the run.
pytestmark = [pytest.mark.slow, pytest.mark.starts_first]

QUICKSTART_ENSEMBLE = "text_embedding"  # README.md's quick start: mme build text_embedding


def tree(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


@pytest.fixture(scope="module")
def docs_walk(tmp_path_factory: pytest.TempPathFactory) -> Walk:
    """A folder where the quick start was done: what its ``mme build`` writes in build/ and its
    copy in models/ (the run's shared build, packaged as ``mme build`` packages it), an empty
    home and tmp."""
    walk = Walk.fresh(tmp_path_factory.mktemp("docs-walk"), free_port(), ("home", "tmp"))
    built = walk.folder / "build" / QUICKSTART_ENSEMBLE
    shutil.copytree(built_repository(tmp_path_factory, QUICKSTART_ENSEMBLE), built)
    tarball = package(built, built.with_name(f"{QUICKSTART_ENSEMBLE}.tar.gz"), "flat")
    (walk.folder / "models").mkdir()
    shutil.copy2(tarball, walk.folder / "models" / tarball.name)
    return walk


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
