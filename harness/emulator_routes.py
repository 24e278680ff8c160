"""The emulator's own JSON routes (``/_emulator/faults``, ``/_emulator/reset``, ...) from Python:
one request, its JSON answer, or the emulator's ``{"error": ...}`` raised as ``RouteRefused``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class RouteRefused(RuntimeError):
    """The emulator refused the request; the message is its word on what to fix."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def call(url: str, method: str, path: str, body: Any = None, timeout_s: float = 30.0,
         refused: type[RouteRefused] = RouteRefused) -> dict[str, Any]:
    """``method path`` on the emulator at ``url`` with ``body`` as JSON; its JSON answer."""
    if not url.startswith(("http://", "https://")):
        raise refused(f"{url!r} is not the emulator's URL: give http://HOST:PORT (--url, or "
                      "MME_EMULATOR_URL)", 0)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            said = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            said = exc.reason
        raise refused(f"{method} {path}: {exc.code} {said}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise refused(f"no emulator answers at {url} ({reason}): start one (mme serve), or "
                      "give its URL (--url, or MME_EMULATOR_URL)", 0) from None
    return answer
