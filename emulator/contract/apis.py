"""Which API a request is: the one place that decides it, for IAM and for dispatch alike.

Every AWS API the emulator serves shares its one port, told apart as botocore sends them:
- sagemaker-runtime (rest-json): ``POST /endpoints/{name}/<operation path>``;
- SageMaker control plane, Application Auto Scaling (JSON 1.1) and CloudWatch (JSON 1.0):
  ``POST /`` with ``X-Amz-Target: <prefix>.<Operation>``;
- CloudWatch's smithy RPC v2 CBOR: ``POST /service/GraniteServiceVersion20100801/operation/<Op>``;
- CloudWatch's query protocol: ``POST /`` with a form body ``Action=<Op>&...`` and no target;
- the emulator's own routes under ``/_emulator/`` (not AWS APIs: the live page and its data).

The SigV4/IAM layer decides on this module's answer and the handlers run on the same answer
(``API_SCOPE_KEY`` carries it from the front door, ``emulator/app.py``), so what IAM approves is
what runs. Two parts of a request could otherwise be read two ways:
- a header sent more than once: ``canonical_headers`` joins the copies into one value, in the
  order they came, with ``,`` (as SigV4 does when it signs them, and as HTTP defines a repeated
  field), so every reader sees the one joined value;
- a form parameter sent more than once: ``parse_form`` refuses it (``RepeatedParameter``); the
  query protocol never repeats a key (lists are ``Name.member.N``). [U] AWS's answer to a repeat.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, MutableMapping
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
CBOR_PREFIX = "/service/GraniteServiceVersion20100801/operation/"
RUNTIME_OPERATIONS = {
    "invocations": "InvokeEndpoint",
    "invocations-response-stream": "InvokeEndpointWithResponseStream",
    "async-invocations": "InvokeEndpointAsync",
}
# Where the front door leaves its answer for the layers behind it (an ASGI extension key).
API_SCOPE_KEY = "mme.api"
# Headers never joined: the HTTP parser has already refused a repeat of these, and joining a
# length would make a valid request invalid.
_NOT_JOINED = frozenset({b"content-length", b"transfer-encoding"})
_RUNTIME_PATH = re.compile(r"/endpoints/([^/]+)/([a-z-]+)")


class Protocol(str, Enum):
    """How an API frames its requests and its errors."""

    REST_JSON = "rest-json"  # sagemaker-runtime, and the emulator's own routes
    # SageMaker control plane, Application Auto Scaling (JSON 1.1), CloudWatch (JSON 1.0)
    JSON = "json"
    CBOR = "cbor"  # CloudWatch, smithy RPC v2 CBOR
    QUERY = "query"  # CloudWatch, Action=... form


class Service(str, Enum):
    """The API a request belongs to."""

    RUNTIME = "sagemaker-runtime"
    SAGEMAKER = "sagemaker"
    AUTOSCALING = "application-autoscaling"
    CLOUDWATCH = "cloudwatch"
    EMULATOR = "emulator"  # the emulator's own routes; documented in docs/auth.md

    @property
    def iam_prefix(self) -> str:
        """The prefix of its IAM actions (the runtime's are sagemaker:InvokeEndpoint...)."""
        return "sagemaker" if self is Service.RUNTIME else self.value

    @property
    def signing_name(self) -> str:
        """The service name a SigV4 credential scope carries for this API; empty for the
        emulator's own routes, which take a signature scoped to any service."""
        return {Service.RUNTIME: "sagemaker", Service.CLOUDWATCH: "monitoring",
                Service.EMULATOR: ""}.get(self, self.value)


TARGET_PREFIXES: Mapping[str, Service] = {
    "SageMaker.": Service.SAGEMAKER,
    "AnyScaleFrontendService.": Service.AUTOSCALING,
    "GraniteServiceVersion20100801.": Service.CLOUDWATCH,
}
# Each service's ``X-Amz-Target`` prefix, for the wire modules that strip it off the operation.
TARGET_PREFIX_OF: Mapping[Service, str] = {s: p for p, s in TARGET_PREFIXES.items()}


class ApiRequest(NamedTuple):  # a tuple: made for every request, at a third of a dataclass's cost
    """One request as the front door reads it.

    ``operation`` is the AWS operation name (``InvokeEndpoint``, ``DescribeModel``...) or, for
    the query protocol, empty until the form is read (``with_form``). ``endpoint`` is the path's
    endpoint name for the runtime and the emulator's per-endpoint routes.
    """

    service: Service
    operation: str
    protocol: Protocol
    endpoint: str | None = None
    target_model: str | None = None  # the emulator's unload route names a model in its path

    @property
    def action(self) -> str:
        # InvokeEndpointWithResponseStream needs sagemaker:InvokeEndpoint (its API reference:
        # "your IAM permissions must allow the sagemaker:InvokeEndpoint action").
        if self.operation == "InvokeEndpointWithResponseStream":
            return "sagemaker:InvokeEndpoint"
        return f"{self.service.iam_prefix}:{self.operation}"


class RepeatedParameter(ValueError):
    """A form (query-protocol) body names one parameter more than once."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Parameter {name} is given more than once; send each parameter once "
                         "(lists are sent as Name.member.1, Name.member.2, ...).")
        self.name = name


def canonical_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]] | None:
    """The headers with each repeated name joined into one; None when no name repeats (the
    usual case, checked without building anything)."""
    # ASGI servers give header names lower-cased (uvicorn, Starlette's test client), so a repeat
    # is a repeated name as given; the join below lower-cases anyway.
    if len(dict(raw)) == len(raw):  # dict() of the pairs: built in C, cheaper than a set's loop
        return None
    joined: dict[bytes, list[bytes]] = {}
    kept: list[tuple[bytes, bytes]] = []
    for name, value in raw:
        lowered = name.lower()
        if lowered in _NOT_JOINED:
            kept.append((lowered, value))
        else:
            joined.setdefault(lowered, []).append(value.strip())
    return kept + [(name, b",".join(values)) for name, values in joined.items()]


def parse_form(body: bytes) -> dict[str, str]:
    """A query-protocol body as one value per name; a repeated name is ``RepeatedParameter``."""
    form: dict[str, str] = {}
    for name, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        if name in form:
            raise RepeatedParameter(name)
        form[name] = value
    return form


def identify(method: str, path: str, headers: Mapping[str, str]) -> ApiRequest | None:
    """The API of a request from its method, decoded path and (canonical, lower-case) headers;
    None for what is no API (``/ping``, ``/metrics``, the page's files, unknown paths).

    A query-protocol request's operation is in its body: ``operation`` is then empty."""
    if method == "POST":
        if path.startswith("/endpoints/"):
            return _runtime_request(path)
        if path.startswith(CBOR_PREFIX):
            return ApiRequest(Service.CLOUDWATCH, path[len(CBOR_PREFIX):], Protocol.CBOR)
        if path == "/":
            target = headers.get("x-amz-target", "")
            for prefix, service in TARGET_PREFIXES.items():
                if target.startswith(prefix):
                    return ApiRequest(service, target[len(prefix):], Protocol.JSON)
            if not target and headers.get("content-type", "").startswith(FORM_CONTENT_TYPE):
                return ApiRequest(Service.CLOUDWATCH, "", Protocol.QUERY)
            return None
    return _emulator_route(method, path)


@functools.lru_cache(maxsize=4096)
def _runtime_request(path: str) -> ApiRequest | None:
    """A runtime request by its path. Kept per path: InvokeEndpoint is the hot path and its
    callers name few endpoints; the answer is immutable, so one object serves every request."""
    match = _RUNTIME_PATH.fullmatch(path)
    if match and match.group(2) in RUNTIME_OPERATIONS:
        return ApiRequest(Service.RUNTIME, RUNTIME_OPERATIONS[match.group(2)],
                          Protocol.REST_JSON, endpoint=match.group(1))
    return None


def with_form(request: ApiRequest, form: Mapping[str, str]) -> ApiRequest:
    """A query-protocol request completed with its ``Action``."""
    return ApiRequest(request.service, form.get("Action", ""), request.protocol)


# The emulator's own data routes, each an action of the ``emulator`` prefix (docs/auth.md).
# What is not here (``/ping``, ``/metrics``, the page's HTML, script and style, the API docs)
# holds nothing tenant-specific and stays open.
_EMULATOR_READS = {
    "/_emulator/models": "DescribeModels",
    "/_emulator/page/state": "DescribeModels",
    "/_emulator/page/stream": "DescribeModels",
    "/_emulator/metrics": "GetMetrics",
}
_UNLOAD = re.compile(r"/_emulator/endpoints/([^/]+)/models/(.+)/unload")


# The fault rules (emulator/routes/faults.py), by method.
_FAULTS = "/_emulator/faults"
_FAULT_ACTIONS = {"GET": "ListFaultRules", "HEAD": "ListFaultRules", "POST": "PutFaultRule",
                  "DELETE": "DeleteFaultRules"}


# The server's whole state (emulator/routes/state.py), by (method, path).
_STATE_ACTIONS = {("POST", "/_emulator/reset"): "Reset",
                  ("GET", "/_emulator/snapshot"): "GetSnapshot",
                  ("HEAD", "/_emulator/snapshot"): "GetSnapshot",
                  ("POST", "/_emulator/snapshot"): "RestoreSnapshot"}
# The clock and the transition rules (emulator/routes/clock.py), by method.
_ADVANCE = "/_emulator/clock/advance"
_TRANSITIONS = "/_emulator/transitions"
_TRANSITION_ACTIONS = {"GET": "ListTransitions", "HEAD": "ListTransitions",
                       "PUT": "PutTransition", "DELETE": "DeleteTransitions"}


def _emulator_route(method: str, path: str) -> ApiRequest | None:
    if method in ("GET", "HEAD") and path in _EMULATOR_READS:
        return ApiRequest(Service.EMULATOR, _EMULATOR_READS[path], Protocol.REST_JSON)
    if (method, path) in _STATE_ACTIONS:
        return ApiRequest(Service.EMULATOR, _STATE_ACTIONS[method, path], Protocol.REST_JSON)
    if path == _ADVANCE and method == "POST":
        return ApiRequest(Service.EMULATOR, "AdvanceClock", Protocol.REST_JSON)
    if path == _TRANSITIONS and method in _TRANSITION_ACTIONS:
        return ApiRequest(Service.EMULATOR, _TRANSITION_ACTIONS[method], Protocol.REST_JSON)
    if (path == _FAULTS or (method == "DELETE" and path.startswith(_FAULTS + "/"))) \
            and method in _FAULT_ACTIONS:
        return ApiRequest(Service.EMULATOR, _FAULT_ACTIONS[method], Protocol.REST_JSON)
    if method == "POST":
        match = _UNLOAD.fullmatch(path)
        if match:
            return ApiRequest(Service.EMULATOR, "UnloadModel", Protocol.REST_JSON,
                              endpoint=match.group(1), target_model=match.group(2))
    return None


def header_lookup(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Canonical headers by lower-case name (each name is there once)."""
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}


def read_request(scope: MutableMapping[str, Any]) -> ApiRequest | None:
    """The front door's one reading of an HTTP request, made once and kept in the scope: its
    repeated headers joined (the scope's header list is replaced) and its API identified.
    Every later reader (IAM, the routes) sees the same headers and the same answer."""
    api: ApiRequest | None = scope.get(API_SCOPE_KEY, _UNREAD)
    if api is not _UNREAD:
        return api
    raw = scope["headers"]
    if len(dict(raw)) != len(raw):  # a repeated name (checked in C: every request pays it)
        scope["headers"] = raw = canonical_headers(raw) or raw
    path: str = scope["path"]
    # Only POST / is told apart by its headers: skip decoding them for every other request.
    api = identify(scope["method"], path, header_lookup(raw) if path == "/" else _NO_HEADERS)
    scope[API_SCOPE_KEY] = api
    return api


_UNREAD: Any = object()  # read_request's mark for a scope not read yet (None is an answer)
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
