"""Who may call what: SigV4 authentication and IAM identity policies (``--auth sigv4``).

The composition root calls ``install_auth(app, settings)`` once, right after creating the app:
with ``--auth off`` (the default) it only logs that auth is off (and warns when the host is not
loopback) and returns no layer; with ``--auth sigv4`` it loads and validates the credentials and
policies, raising ``AuthConfigError`` (file and reason) on anything wrong, and returns the
``SigV4Middleware`` layer, which the front door (``emulator/app.py``) puts around every route.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING, Any

from emulator.auth.credentials import AuthConfigError, Principal, load_principals
from emulator.auth.middleware import SigV4Middleware

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import FastAPI
    from starlette.types import ASGIApp

    from emulator.settings import Settings

__all__ = ["AuthConfigError", "Principal", "SigV4Middleware", "install_auth", "is_loopback"]

log = logging.getLogger(__name__)

AUTH_MODES = ("off", "sigv4")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname: assume it is reachable from elsewhere


def install_auth(app: FastAPI, settings: Settings,
                 page_key: str | None = None) -> Callable[[ASGIApp], ASGIApp]:
    """The auth layer for ``settings``; with sigv4, ``page_key`` (``emulator/page_key.py``) lets
    a browser that holds it read the live page's data."""
    mode = getattr(settings, "auth", "off") or "off"
    if mode not in AUTH_MODES:
        raise AuthConfigError(None, f"--auth {mode!r}: expected off or sigv4")
    if mode == "off":
        log.info("auth is off: every request is accepted, signed or not, and no IAM policy is "
                 "checked (--auth sigv4 --credentials FILE --policies DIR to enforce them)")
        if not is_loopback(settings.host):
            log.warning(
                "listening on %s without authentication: anyone who can reach this address can "
                "invoke every model, create and delete endpoints, and load model archives whose "
                "Python backend code then runs on this machine. Use --auth sigv4 or bind to "
                "127.0.0.1.", settings.host)
        return lambda inner: inner
    credentials, policies = settings.credentials, settings.policies
    if credentials is None or policies is None:
        missing = " and ".join(n for n, v in (("--credentials", credentials),
                                                ("--policies", policies)) if v is None)
        raise AuthConfigError(None, f"--auth sigv4 needs {missing}")
    principals = load_principals(credentials, policies, settings.account_id)
    for principal in principals.values():
        if not principal.policies:
            log.warning("principal %s has no policy in %s: every request it signs is denied",
                        principal.arn, policies)
    options: dict[str, Any] = {"principals": principals, "region": settings.region,
               "account": settings.account_id, "max_payload_bytes": settings.max_payload_bytes,
               "page_key": page_key}
    log.info("auth is sigv4: %d principal(s) from %s, policies from %s", len(principals),
             credentials, policies)
    return lambda inner: SigV4Middleware(inner, **options)
