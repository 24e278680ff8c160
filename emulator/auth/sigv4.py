"""SigV4 verification with botocore's own signing code: no hand-written crypto here.

The signature is recomputed by ``botocore.auth.SigV4Auth`` from the request as received (the
client's own X-Amz-Date, the headers it listed in SignedHeaders, the raw percent-encoded path and
the body) and compared with ``hmac.compare_digest``. botocore quotes the path once more when it
signs (non-S3 services), so passing the raw path as sent reproduces exactly what the client did.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

from emulator.auth import auth_errors
from emulator.auth.credentials import Principal

ALGORITHM = "AWS4-HMAC-SHA256"
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_PARAM = re.compile(r"(Credential|SignedHeaders|Signature)=([^,\s]*)")


@dataclass(frozen=True)
class Authorization:
    access_key: str
    date: str  # YYYYMMDD of the credential scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None, amz_date: str | None) -> Authorization:
    if not value:
        raise auth_errors.unsigned()
    if not value.startswith(ALGORITHM + " "):
        # [U] AWS's text for another scheme; botocore only ever sends AWS4-HMAC-SHA256.
        raise auth_errors.incomplete(f"Unsupported authorization scheme; only {ALGORITHM} "
                                f"(SigV4) is accepted. Authorization={value.split(' ')[0]}")
    params = dict(_PARAM.findall(value))
    problems = [f"Authorization header requires '{name}' parameter."
                for name in ("Credential", "Signature", "SignedHeaders") if not params.get(name)]
    if not amz_date:
        problems.append("Authorization header requires existence of either a 'X-Amz-Date' or "
                        "a 'Date' header.")
    if problems:
        raise auth_errors.incomplete(" ".join(problems) + f" Authorization={value}")
    scope = params["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise auth_errors.incomplete(f"Credential should be of the form "
                                f"<key>/<YYYYMMDD>/<region>/<service>/aws4_request, "
                                f"not {params['Credential']!r}.")
    return Authorization(scope[0], scope[1], scope[2], scope[3],
                         tuple(params["SignedHeaders"].lower().split(";")), params["Signature"])


def verify(*, method: str, raw_path: bytes, query: bytes, headers: Sequence[tuple[str, str]],
           body: bytes, principals: Mapping[str, Principal], service: str, region: str,
           now: datetime | None = None) -> Principal:
    """The principal who signed this request, or an ``AuthError`` saying why not.

    ``headers`` are (lowercased name, value) pairs as received.
    """
    now = now or datetime.now(timezone.utc)
    lookup = dict(headers)
    amz_date = lookup.get("x-amz-date")
    auth = parse_authorization(lookup.get("authorization"), amz_date)
    assert amz_date is not None  # parse_authorization refuses a request without it
    principal = principals.get(auth.access_key)
    if principal is None or lookup.get("x-amz-security-token") != principal.session_token:
        raise auth_errors.unknown_key()
    try:
        signed_at = datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise auth_errors.incomplete(f"X-Amz-Date {amz_date!r} is not in the ISO 8601 basic "
                                "format YYYYMMDDTHHMMSSZ.") from exc
    if signed_at < now - auth_errors.CLOCK_SKEW:
        raise auth_errors.expired(signed_at, now)
    if signed_at > now + auth_errors.CLOCK_SKEW:
        raise auth_errors.not_yet_current(signed_at, now)
    if auth.date != amz_date[:8]:
        raise auth_errors.wrong_scope(f"Date in Credential scope does not match YYYYMMDD from "
                                      f"ISO-8601 version of date from HTTP: '{auth.date}' != "
                                      f"'{amz_date[:8]}', from '{amz_date}'.")
    if auth.region != region:
        raise auth_errors.wrong_scope(f"Credential should be scoped to a valid region, not "
                                      f"'{auth.region}'. ")  # [U] this endpoint serves one region
    if auth.service != service:
        raise auth_errors.wrong_scope(
            f"Credential should be scoped to correct service: '{service}'. ")
    declared_hash = lookup.get("x-amz-content-sha256")
    if declared_hash and declared_hash != "UNSIGNED-PAYLOAD" and \
            not hmac.compare_digest(declared_hash, hashlib.sha256(body).hexdigest()):
        raise auth_errors.bad_signature()  # the body is not the one whose hash was signed

    signed = HTTPHeaders()
    for name, value in headers:
        if name in auth.signed_headers:
            signed[name] = value
    if any(name not in signed for name in auth.signed_headers):
        raise auth_errors.bad_signature()  # a header it signed did not arrive
    url = f"http://{lookup.get('host', 'localhost')}{raw_path.decode('latin-1')}"
    if query:
        url += "?" + query.decode("latin-1")
    request = AWSRequest(method=method, url=url, headers=signed, data=body)
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(principal.access_key, principal.secret_key,
                                   principal.session_token), auth.service, auth.region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, auth.signature):
        raise auth_errors.bad_signature()
    return principal
