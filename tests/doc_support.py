"""The fenced blocks of README.md and docs/*.md, and which of them a reader can run.

Every fence names its language (```bash, ```python, ```yaml, ```text, ...). A ``bash`` or
``python`` block is run as written by ``tests/integration/test_docs_pages.py`` unless the line
right before its fence is ``<!-- illustrative: why -->`` (real AWS, a GPU host, a Docker image,
placeholders a reader fills in, a fragment of a larger program). tests/README.md says the same.
"""

from __future__ import annotations

import re
import shlex
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


# The walk (tests/integration/test_docs_pages.py): each page as one shell session. A line that
# starts `mme serve` is "another terminal": started in the background (in place of the page's
# previous server) and waited for until it says it is ready; a python block is run with
# `python -`, and when it prints with a comment (`print(x)  # ALARM`, its last such line) its
# output must end with that. The walk replaces the ports 8080 and 9000 with free ones.

PRELUDE = r"""
set -eo pipefail
trap 'echo "failed: $BASH_COMMAND" >&2' ERR
server=
served=0
stop_server() {
  if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" || true; fi
  server=
}
serve() {
  stop_server
  served=$((served + 1))
  : > "serve-$served.log"  # emptied before the server starts: an earlier page's is not read
  bash -c "exec $1" > "serve-$served.log" 2>&1 &
  server=$!
  until grep -q "ready on" "serve-$served.log"; do
    kill -0 "$server" 2>/dev/null || {
      echo "stopped: $1" >&2; cat "serve-$served.log" >&2; exit 1; }
    sleep 0.1
  done
}
trap 'stop_server; jobs -p | xargs -r kill; wait' EXIT
"""
SERVE = re.compile(r"^(\.venv/bin/)?mme serve\b")


def walked_pages() -> list[str]:
    """The pages with a block for the walk to run."""
    return [str(page.relative_to(ROOT)) for page in pages()
            if any(walked(block) for block in blocks(page))]


def walked(block: Block) -> bool:
    return block.runs and block.heading not in RUN_BY_QUICKSTART.get(block.page, ())


# Run by the walk's quick start tests, which check what they print.
RUN_BY_QUICKSTART = {"README.md": ("## Quickstart", "### Deploy to it as to SageMaker")}


def bash_lines(code: str) -> list[str]:
    """A bash block as written, but each `mme serve` command (continuations included) started
    in the background by ``serve``."""
    lines, physical = [], code.splitlines()
    while physical:
        line = physical.pop(0)
        if not SERVE.match(line):
            lines.append(line)
            continue
        while line.endswith("\\") and physical:
            line = line[:-1] + physical.pop(0)
        (command,) = logical_lines(line)
        lines.append(f"serve {shlex.quote(command)}")
    return lines


def page_script(page: Path, root: Path = ROOT, report_objects: bool = True) -> str:
    """The page's walked blocks as one bash script; at its end (``report_objects``) a line
    ``AWS objects left: {json}`` from the page's last server, which it then stops."""
    script = [PRELUDE]
    for block in blocks(page, root):
        if not walked(block):
            continue
        script.append(f"echo '### {block.where}'")
        if block.language == "bash":
            script += bash_lines(block.code)
            continue
        script.append(f"python - <<'PYTHON_BLOCK' | tee .printed\n{block.code}PYTHON_BLOCK")
        promised = [found for line in block.code.splitlines()
                    if (found := re.fullmatch(r"print\(.*\)\s+#\s*(.+)", line.strip()))]
        if promised:
            said = shlex.quote(promised[-1].group(1).strip())
            script.append(f'[ "$(tail -n 1 .printed)" = {said} ] || '
                          f'{{ echo "{block.where} does not print "{said} >&2; exit 1; }}')
    if report_objects:
        script.append(f"[ -z \"$server\" ] || python - <<'PYTHON_BLOCK'\n{AWS_OBJECTS}PYTHON_BLOCK")
    script.append("stop_server")
    return "\n".join(script) + "\n"


# What the page's last server still holds, printed for the test to read (its cache folder is
# the next page's too). The endpoint `mme serve --model-data` serves has no config: not listed.
AWS_OBJECTS = """\
import json, boto3
keys = {"endpoint_url": "http://127.0.0.1:8080", "region_name": "us-east-1",
        "aws_access_key_id": "x", "aws_secret_access_key": "x"}
sm, cw = boto3.client("sagemaker", **keys), boto3.client("cloudwatch", **keys)
asg = boto3.client("application-autoscaling", **keys)
try:
    held = {"endpoint configs": [c["EndpointConfigName"]
                                 for c in sm.list_endpoint_configs()["EndpointConfigs"]],
            "models": [m["ModelName"] for m in sm.list_models()["Models"]],
            "inference components": [c["InferenceComponentName"] for c in
                                     sm.list_inference_components()["InferenceComponents"]],
            "alarms": [a["AlarmName"] for a in cw.describe_alarms()["MetricAlarms"]],
            "scalable targets": [t["ResourceId"] for t in asg.describe_scalable_targets(
                ServiceNamespace="sagemaker")["ScalableTargets"]]}
except Exception as error:  # --auth sigv4: dummy keys may read nothing
    held = {"unreadable": [type(error).__name__]}
print("AWS objects left:", json.dumps(held))
"""
