"""The sagemaker-runtime InvokeEndpoint wire format and its translation to Triton's KServe v2.

No state and no I/O. Tensors are never decoded: a binary body passes through, and only the JSON
header length moves between SageMaker-Triton's ``json-header-size=N`` content-type parameter and
KServe's ``Inference-Header-Content-Length`` header.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass

from emulator.contract import multi_container, runtime_errors, sessions, triton_guard
from emulator.contract.body import Body

BINARY_JSON = "application/vnd.sagemaker-triton.binary+json"

ENDPOINT_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
# botocore: TargetModel is 1-1024 chars, \A\S[\p{Print}]*\z
TARGET_MODEL = re.compile(r"\A\S[\x20-\x7e\u00a0-\U0010ffff]*\Z")
_HEADER_SIZE = re.compile(r"json-header-size=([^;\s]*)")

H_TARGET_MODEL = "x-amzn-sagemaker-target-model"
H_CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes"
H_INFERENCE_ID = "x-amzn-sagemaker-inference-id"
# KServe's header for the length of a binary body's JSON part.
KSERVE_HEADER_LENGTH = "Inference-Header-Content-Length"
H_TARGET_VARIANT = "x-amzn-sagemaker-target-variant"
# InferenceComponentName: which inference component of an endpoint for components serves.
H_INFERENCE_COMPONENT = "x-amzn-sagemaker-inference-component"
# PrefixAwareId: a routing hint beside the body's prefix (RoutingStrategy PREFIX_AWARE).
H_PREFIX_AWARE_ID = "x-amzn-sagemaker-prefix-aware-id"

# botocore: ContentType, Accept and CustomAttributes are each at most 1,024 characters.
MAX_HEADER_LENGTH = 1024
_LIMITED_HEADERS = (("content-type", "contentType"), ("accept", "accept"),
                    (H_CUSTOM_ATTRIBUTES, "customAttributes"))


@dataclass(frozen=True)
class InvokeRequest:
    endpoint_name: str
    request_id: str
    body: bytes | Body  # as it arrived: ``bytes(body)`` where the whole is needed
    content_type: str | None
    accept: str | None
    target_model: str | None
    custom_attributes: str | None
    inference_id: str | None
    target_variant: str | None
    # Multi-container endpoints in Direct mode (emulator.hosting.multi_container).
    target_container_hostname: str | None = None
    inference_component: str | None = None  # endpoints for inference components
    # SessionId: NEW_SESSION or an open session's id (``contract.sessions``).
    session_id: str | None = None
    prefix_aware_id: str | None = None  # PrefixAwareId (RoutingStrategy PREFIX_AWARE)
    # The container's time to answer (None: the server's --invocation-timeout); an
    # asynchronous request's InvocationTimeoutSeconds.
    timeout_s: float | None = None


class ContainerRejected(Exception):
    """What Triton's SageMaker server itself would answer with (becomes a ModelError)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


def new_request_id() -> str:
    """A random (version 4) UUID, as ``str(uuid.uuid4())`` spells it, at a third of its cost:
    a request id needs uniqueness, not unpredictability (no os.urandom call per request)."""
    bits = (random.getrandbits(128) & ~(0xF000 << 64) & ~(0xC000 << 48)
            | 0x4000 << 64 | 0x8000 << 48)
    h = f"{bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _printable_id(headers: Mapping[str, str], header: str, member: str) -> str | None:
    """The header's value (None: not sent), checked as botocore's model checks ``member``: 1-64
    characters, \\A\\S[\\p{Print}]*\\z."""
    value = headers.get(header)
    if value is not None:
        if len(value) > 64:
            raise runtime_errors.header_too_long(header, member, 64)
        if not TARGET_MODEL.match(value):
            raise runtime_errors.ValidationError(
                f"1 validation error detected: Value '{value}' at '{member}' failed to satisfy "
                r"constraint: Member must satisfy regular expression pattern: \A\S[\p{Print}]*\z")
    return value


def parse_invoke(endpoint_name: str, headers: Mapping[str, str], body: bytes | Body,
                 max_payload_bytes: int, request_id: str,
                 streaming: bool = False) -> InvokeRequest:
    """Validate what SageMaker's front end validates; raise ValidationError otherwise
    (``streaming``: InvokeEndpointWithResponseStream, whose SessionId cannot be NEW_SESSION)."""
    if len(endpoint_name) > 63 or not ENDPOINT_NAME.match(endpoint_name):
        raise runtime_errors.ValidationError(
            f"1 validation error detected: Value '{endpoint_name}' at 'endpointName' failed to "
            "satisfy constraint: Member must satisfy regular expression pattern: "
            "^[a-zA-Z0-9](-*[a-zA-Z0-9])*"
        )
    if len(body) > max_payload_bytes:
        raise runtime_errors.oversize_body(request_id, max_payload_bytes)
    for header, member in _LIMITED_HEADERS:
        value = headers.get(header)
        if value is not None and len(value) > MAX_HEADER_LENGTH:
            raise runtime_errors.header_too_long(header, member, MAX_HEADER_LENGTH)
    target = headers.get(H_TARGET_MODEL)
    if target is not None:
        if len(target) > 1024:
            raise runtime_errors.invalid_target_model(
                target[:64] + "...", "Member must have length less than or equal to 1024")
        if not TARGET_MODEL.match(target):
            raise runtime_errors.invalid_target_model(
                target, r"Member must satisfy regular expression pattern: \A\S[\p{Print}]*\z")
    inference_id = _printable_id(headers, H_INFERENCE_ID, "inferenceId")
    prefix_aware_id = _printable_id(headers, H_PREFIX_AWARE_ID, "prefixAwareId")
    return InvokeRequest(
        endpoint_name=endpoint_name,
        request_id=request_id,
        body=body,
        content_type=headers.get("content-type"),
        accept=headers.get("accept"),
        target_model=target,
        custom_attributes=headers.get(H_CUSTOM_ATTRIBUTES),
        inference_id=inference_id,
        target_variant=headers.get(H_TARGET_VARIANT),
        target_container_hostname=_container_hostname(headers),
        inference_component=headers.get(H_INFERENCE_COMPONENT),
        session_id=sessions.parse_session_id(headers, streaming),
        prefix_aware_id=prefix_aware_id,
    )


def _container_hostname(headers: Mapping[str, str]) -> str | None:
    """TargetContainerHostname, checked against botocore's constraints (max 63, pattern)."""
    value = headers.get(multi_container.H_TARGET_CONTAINER_HOSTNAME)
    if value is not None and (len(value) > 63 or not ENDPOINT_NAME.match(value)):
        raise multi_container.invalid_container_hostname(value)
    return value


def triton_request_headers(content_type: str | None, body_length: int) -> dict[str, str]:
    """KServe headers for a SageMaker-Triton body, checked as Triton's SageMaker server does."""
    if content_type and content_type.startswith(BINARY_JSON):
        match = _HEADER_SIZE.search(content_type)
        if not match:
            raise ContainerRejected(400, '{"error":"Unable to parse json-header-size from '
                                         f'content type \'{content_type}\'"}}')
        try:
            size = int(match.group(1))
        except ValueError:
            raise ContainerRejected(
                400, f'{{"error":"Unable to parse inference header size, got: {match.group(1)}"}}'
            ) from None
        if size < 0 or size > body_length:
            raise ContainerRejected(
                400, f'{{"error":"inference header size should be in range (0, {body_length}), '
                     f'got: {size}"}}'
            )
        return {"Content-Type": "application/octet-stream", KSERVE_HEADER_LENGTH: str(size)}
    # Any other content type (the seeds send JSON as application/octet-stream): the body is JSON.
    return {"Content-Type": "application/json"}


def screen_body(body: bytes | Body, header_length: int | None) -> None:
    """Answer, as Triton would, the few bodies that crash Triton 2.51 instead (triton_guard)."""
    if header_length is None:
        json_text = bytes(body)
    else:
        json_text = body.head(header_length) if isinstance(body, Body) else body[:header_length]
    refusal = triton_guard.refusal(json_text, binary=header_length is not None)
    if refusal is not None:
        raise ContainerRejected(triton_guard.TRITON_STATUS, refusal)


def binary_header_length(triton_headers: Mapping[str, str]) -> int | None:
    size = triton_headers.get(KSERVE_HEADER_LENGTH)
    return int(size) if size is not None else None


def sagemaker_content_type(header_length: int | None) -> str:
    """The response content type a SageMaker-Triton client expects (it parses N back out)."""
    if header_length is not None:
        return f"{BINARY_JSON};json-header-size={header_length}"
    return "application/json"


def rename_model(body: bytes, header_length: int | None, triton_name: str,
                 target_model: str) -> tuple[bytes, int | None]:
    """Report the model as SageMaker's Triton does: named after the TargetModel.

    Triton writes ``"model_name":"<name>"`` first in its JSON header, so one bounded byte
    replacement suffices (no JSON parsing in the hot path); the header length grows or shrinks by
    the difference.
    """
    old, new = _model_name_fields(triton_name, target_model)
    head = body[: header_length if header_length is not None else 512]
    if old not in head:
        return body, header_length
    body = body.replace(old, new, 1)
    if header_length is not None:
        header_length += len(new) - len(old)
    return body, header_length


@functools.lru_cache(maxsize=4096)
def _model_name_fields(triton_name: str, target_model: str) -> tuple[bytes, bytes]:
    return (b'"model_name":' + json.dumps(triton_name).encode(),
            b'"model_name":' + json.dumps(target_model).encode())


def response_headers(request_id: str, variant: str, content_type: str,
                     custom_attributes: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": content_type,
        "x-Amzn-Invoked-Production-Variant": variant,
        "x-amzn-RequestId": request_id,
    }
    if custom_attributes is not None:
        headers["X-Amzn-SageMaker-Custom-Attributes"] = custom_attributes
    return headers


# Emulator-only response headers (not in SageMaker's contract), for load tests and debugging:
# the model's own time, whether the model was already loaded, which instance (or copy) answered,
# and, during a blue/green deployment, which generation.
H_MODEL_LATENCY_US = "X-Mme-Model-Latency-Us"
H_MODEL_CACHE_HIT = "X-Mme-Model-Cache-Hit"
H_INSTANCE = "X-Mme-Instance"
H_GENERATION = "X-Mme-Generation"
# How the serving unit was chosen when a strategy beyond the default chose it (PREFIX_AWARE, a
# session): ``docs/sessions-and-routing.md``.
H_ROUTED_BY = "X-Mme-Routed-By"
# Beside an error, the emulator's hint (a TargetModel the store does not hold: what it holds).
H_HINT = "X-Mme-Hint"
HINT_MAX_CHARS = 2000


def add_emulator_headers(headers: dict[str, str], instance: str,
                         model_latency_s: float | None = None,
                         cache_hit: bool | None = None) -> dict[str, str]:
    """``headers`` with the emulator's own headers added; ``instance``: "<variant>/<id>"."""
    if model_latency_s is not None:
        headers[H_MODEL_LATENCY_US] = str(int(model_latency_s * 1e6))
    if cache_hit is not None:
        headers[H_MODEL_CACHE_HIT] = "1" if cache_hit else "0"
    headers[H_INSTANCE] = instance
    return headers


def error_headers(error: runtime_errors.SageMakerError, request_id: str) -> dict[str, str]:
    headers = {**error.headers(), "x-amzn-RequestId": request_id}
    if error.hint:  # a header carries printable ASCII: anything else escaped, as ascii() does
        text = error.hint.encode("ascii", "backslashreplace").decode("ascii")
        text = "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" for c in text)
        headers[H_HINT] = text[:HINT_MAX_CHARS]
    return headers
