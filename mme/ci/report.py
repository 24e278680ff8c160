"""The report folder of ``mme ci down --report DIR``: what the emulator saw, kept as files.

Read from the live server before it stops:

- ``models.json``    ``GET /_emulator/models`` (every endpoint, variant, instance and model)
- ``metrics.json``   ``GET /_emulator/metrics`` (SageMaker's metrics, CloudWatch statistics)
- ``metrics.prom``   ``GET /metrics`` (the Prometheus text)
- ``page.html``      the live page as one self-contained file: its own HTML, style sheet and
                     script inlined with the state it showed, and an ``EventSource`` stand-in
                     that hands the script that state once: it opens from an artifact with no
                     server and no network
- ``page-state.json`` that state (``GET /_emulator/page/state``)

and written after it stopped: ``server.log``, ``model-stats.json`` (per model, ``stats.py``),
``tests.json`` (what pytest reported: goldens and budgets) and ``summary.md``.

With ``--auth sigv4`` the emulator's data routes need a signed request: they are signed with
the job's credentials (``AWS_*``), as a client of the emulator would; a read that fails is named
in ``summary.md`` and in a ``<file>.error.txt`` instead of failing the stop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMEOUT_S = 10.0
# file name -> path on the server, read in this order
LIVE_FILES = {
    "models.json": "/_emulator/models",
    "metrics.json": "/_emulator/metrics",
    "metrics.prom": "/metrics",
    "page-state.json": "/_emulator/page/state",
}
PAGE_PARTS = {"index.html": "/_emulator/", "app.js": "/_emulator/page/app.js",
              "style.css": "/_emulator/page/style.css"}
# The page's links to the data routes -> the files beside page.html in the report.
PAGE_LINKS = {'href="/_emulator/models"': 'href="models.json"',
              'href="/_emulator/metrics"': 'href="metrics.json"',
              'href="/metrics"': 'href="metrics.prom"'}


@dataclass
class LiveData:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # file name -> why it is missing

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.files[name])
        except (KeyError, ValueError):
            return None


def _signed_get(url: str, region: str) -> urllib.request.Request:
    """A GET signed with SigV4 by the job's credentials (any service name is accepted)."""
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    credentials = botocore.session.get_session().get_credentials()
    if credentials is None:
        raise PermissionError("auth is on and no AWS credentials are set to sign the read")
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(credentials.get_frozen_credentials(), "sagemaker", region).add_auth(request)
    return urllib.request.Request(url, headers=dict(request.headers.items()))


def _get(base: str, path: str, *, sign: bool, region: str) -> bytes:
    url = base + path
    request = _signed_get(url, region) if sign else urllib.request.Request(url)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return bytes(response.read())


def read_live(base_url: str, *, auth: str, region: str) -> LiveData:
    """Everything the report keeps from the running server; never raises for one read."""
    data = LiveData()
    wanted = {**LIVE_FILES, **PAGE_PARTS}
    for name, path in wanted.items():
        # /metrics, /ping and the page's own files are open with auth on; the data routes not.
        sign = auth == "sigv4" and path.startswith("/_emulator/") and name not in PAGE_PARTS
        try:
            data.files[name] = _get(base_url, path, sign=sign, region=region)
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            data.errors[name] = f"GET {path} answered {exc.code}: {detail}"
        except (OSError, PermissionError) as exc:
            data.errors[name] = f"GET {path} failed: {exc}"
    return data


SNAPSHOT_SHIM = """\
// A snapshot of the live page (mme ci down): the state below is handed to the page's own
// script once, through this stand-in for the server-sent events it reads when live.
(function () {
  const snapshot = __STATE__;
  class SnapshotSource {
    constructor() { this.readyState = 1; }
    addEventListener(type, listener) {
      if (type !== "state") return;
      setTimeout(() => {
        listener({ data: JSON.stringify(snapshot) });
        const status = document.getElementById("connection");
        if (status) {
          status.textContent = "snapshot taken " + new Date(snapshot.Time * 1000).toLocaleString();
          status.dataset.connected = "false";
          status.dataset.snapshot = "true";
        }
      }, 0);
    }
    close() {}
  }
  SnapshotSource.CLOSED = 2;
  window.EventSource = SnapshotSource;
})();
"""


def _inline_script(code: str) -> str:
    return "<script>\n" + code.replace("</script", "<\\/script") + "\n</script>"


def page_snapshot(data: LiveData) -> str | None:
    """The live page with its style, script and state inlined; None if a part is missing."""
    if not all(name in data.files for name in ("index.html", "app.js", "style.css",
                                               "page-state.json")):
        return None
    html = data.files["index.html"].decode()
    css = data.files["style.css"].decode()
    script = data.files["app.js"].decode()
    state = json.dumps(json.loads(data.files["page-state.json"])).replace("</", "<\\/")
    style_tag = '<link rel="stylesheet" href="/_emulator/page/style.css">'
    script_tag = '<script src="/_emulator/page/app.js"></script>'
    inline_style = "<style>\n" + css.replace("</style", "<\\/style") + "\n</style>"
    inline_scripts = (_inline_script(SNAPSHOT_SHIM.replace("__STATE__", state))
                      + "\n" + _inline_script(script))
    # The page is the server's own: if its tags ever change, still inline (head and body end).
    html = html.replace(style_tag, inline_style) if style_tag in html \
        else html.replace("</head>", inline_style + "\n</head>")
    html = html.replace(script_tag, inline_scripts) if script_tag in html \
        else html.replace("</body>", inline_scripts + "\n</body>")
    for live, kept in PAGE_LINKS.items():
        html = html.replace(live, kept)
    return html.replace("<title>MME emulator · live</title>",
                        "<title>MME emulator · snapshot</title>")


def write_live(report: Path, data: LiveData) -> None:
    report.mkdir(parents=True, exist_ok=True)
    for name in LIVE_FILES:
        if name in data.files:
            (report / name).write_bytes(data.files[name])
        elif name in data.errors:
            (report / f"{name}.error.txt").write_text(data.errors[name] + "\n")
    page = page_snapshot(data)
    if page is not None:
        (report / "page.html").write_text(page, encoding="utf-8")
    else:
        missing = "; ".join(data.errors.get(n, f"{n} missing") for n in
                            ("index.html", "app.js", "style.css", "page-state.json")
                            if n not in data.files)
        (report / "page.html.error.txt").write_text(f"no page snapshot: {missing}\n")
