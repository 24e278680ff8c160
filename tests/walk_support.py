"""A folder a new user works in, for the docs walks (tests/integration/test_readme_walk.py: the
quick start; tests/integration/test_docs_pages.py: every other block): its shell, and the
processes it started, each carrying the walk's tag in its environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]
TIMEOUT_S = 600  # a build, a server start, a load test: each well under this
TAG = "DOCS_WALK_TAG"  # in the environment of every process the walk starts


class Walk:
    """A folder holding only ``.venv`` (this checkout's) and the folders ``made``, with HOME
    pointed inside it, so nothing built or cached earlier helps."""

    @classmethod
    def fresh(cls, folder: Path, port: int, made: tuple[str, ...] = ("home",)) -> Walk:
        (folder / ".venv").symlink_to(ROOT / ".venv")
        for name in made:
            (folder / name).mkdir()
        return cls(folder, port)

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
