"""The live page's key: how a browser reads the page's data when ``--auth sigv4`` is on.

A browser cannot sign requests, so with auth on the server makes a random key at start and
says the page's address with it (``/_emulator/?key=...``, in ``mme serve``'s "ready" line).
Opening that address sets a cookie (HttpOnly, SameSite=Strict, path ``/_emulator/``) holding
the key; with it the browser reads the page's own data (``/_emulator/page/state`` and
``/stream``, what ``emulator:DescribeModels`` grants) without a signature, as whoever started
the server, who has the key, could read it anyway. The key opens nothing else: every AWS API
and the emulator's other routes still need a signature. It lives as long as the server.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from http.cookies import CookieError, SimpleCookie

COOKIE = "mme-page-key"
COOKIE_PATH = "/_emulator/"
# What the key opens: the page's data, read-only.
PAGE_DATA_PATHS = frozenset({"/_emulator/page/state", "/_emulator/page/stream"})


def new_key() -> str:
    return secrets.token_urlsafe(24)


def cookie_value(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The page key's cookie among a request's raw headers, if any."""
    for name, value in headers:
        if name.lower() != b"cookie":
            continue
        cookies: SimpleCookie = SimpleCookie()
        try:
            cookies.load(value.decode("latin-1"))
        except CookieError:
            continue
        if COOKIE in cookies:
            return cookies[COOKIE].value
    return None


def matches(given: str | None, key: str | None) -> bool:
    return given is not None and key is not None and secrets.compare_digest(given, key)


def set_cookie_header(key: str) -> str:
    return f"{COOKIE}={key}; Path={COOKIE_PATH}; HttpOnly; SameSite=Strict"
