"""Asynchronous inference on the wire: InvokeEndpointAsync's request and answer, where results
and failures are written, the SNS notifications, and the words of every refusal.

Sources: botocore's sagemaker-runtime model (``InvokeEndpointAsyncInput``/``Output``), its
sagemaker model (``AsyncInferenceConfig``) and AWS's Asynchronous Inference guide ("Check
prediction results", "Monitor asynchronous endpoint"). No state, no I/O. Details AWS does not
publish are marked [U] here, in one place, and listed in docs/async-inference.md.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from emulator.contract import runtime_errors
from emulator.contract.runtime import ENDPOINT_NAME, MAX_HEADER_LENGTH, TARGET_MODEL

# Request headers (botocore's locationName, lower-case as the server reads them).
H_CONTENT_TYPE = "x-amzn-sagemaker-content-type"
H_ACCEPT = "x-amzn-sagemaker-accept"
H_CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes"
H_INFERENCE_ID = "x-amzn-sagemaker-inference-id"
H_INPUT_LOCATION = "x-amzn-sagemaker-inputlocation"
H_OUTPUT_EXTENSION = "x-amzn-sagemaker-s3outputpathextension"
H_FILENAME = "x-amzn-sagemaker-filename"
H_TTL = "x-amzn-sagemaker-requestttlseconds"
H_TIMEOUT = "x-amzn-sagemaker-invocationtimeoutseconds"
# Response headers; InferenceId is the JSON body's only member.
H_OUTPUT_LOCATION = "X-Amzn-SageMaker-OutputLocation"
H_FAILURE_LOCATION = "X-Amzn-SageMaker-FailureLocation"

# botocore: AsyncBodyBlob max 128,000 bytes; RequestTTLSeconds 60-21600 (default 6 hours);
# InvocationTimeoutSeconds 1-3600 (default 15 minutes, the member's documentation).
MAX_INLINE_BODY = 128_000
TTL_RANGE = (60, 21_600)
DEFAULT_TTL_S = 21_600
TIMEOUT_RANGE = (1, 3_600)
DEFAULT_TIMEOUT_S = 900
# AWS: "If no value is provided, SageMaker chooses an optimal value" [U: the emulator's is 4].
DEFAULT_MAX_CONCURRENT_PER_INSTANCE = 4
# AsyncInferenceNotificationConfig: "The inference response is included only if the response
# size is less than or equal to 128 KB."
MAX_RESPONSE_IN_NOTIFICATION = 128 * 1024
SUCCESS_TOPIC_TYPE = "SUCCESS_NOTIFICATION_TOPIC"
ERROR_TOPIC_TYPE = "ERROR_NOTIFICATION_TOPIC"

_INPUT_LOCATION = re.compile(r"^(https|s3)://([^/]+)/?(.*)$")
_EXTENSION = re.compile(r"^(?!s3:|https:)[a-zA-Z0-9!_.*'()/-]+$")
_FILENAME = re.compile(r"^(?!.*\..*\.)[a-zA-Z0-9][a-zA-Z0-9-_\.]*$")
_ASCII = re.compile(r"^[\x00-\x7f]*$")


@dataclass(frozen=True)
class AsyncInvokeRequest:
    """One accepted InvokeEndpointAsync, as it is queued (and kept across a restart)."""

    endpoint_name: str
    inference_id: str
    content_type: str | None
    accept: str | None
    custom_attributes: str | None
    input_location: str | None  # s3://bucket/key, or None with an inline body
    output_extension: str | None
    filename: str | None
    ttl_s: int
    timeout_s: int

    def to_doc(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> AsyncInvokeRequest:
        return cls(**{k: doc.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def _violation(value: object, member: str, constraint: str) -> runtime_errors.ValidationError:
    return runtime_errors.ValidationError(
        f"1 validation error detected: Value '{value}' at '{member}' failed to satisfy "
        f"constraint: {constraint}")


def _integer(headers: Mapping[str, str], header: str, member: str, bounds: tuple[int, int],
             default: int) -> int:
    text = headers.get(header)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise _violation(text, member, "Member must be an integer") from None  # [U] wording
    low, high = bounds
    if value < low:
        raise _violation(value, member, f"Member must have value greater than or equal to {low}")
    if value > high:
        raise _violation(value, member, f"Member must have value less than or equal to {high}")
    return value


def parse_async_invoke(endpoint_name: str, headers: Mapping[str, str], body: bytes,
                       request_id: str) -> tuple[AsyncInvokeRequest, bytes | None]:
    """The request and its inline body (None: the input is at InputLocation), validated as
    botocore's model constrains each member; a ValidationError otherwise."""
    if len(endpoint_name) > 63 or not ENDPOINT_NAME.match(endpoint_name):
        raise _violation(endpoint_name, "endpointName",
                         "Member must satisfy regular expression pattern: "
                         "^[a-zA-Z0-9](-*[a-zA-Z0-9])*")
    if len(body) > MAX_INLINE_BODY:
        raise runtime_errors.oversize_body(request_id, MAX_INLINE_BODY)
    for header, member in ((H_CONTENT_TYPE, "contentType"), (H_ACCEPT, "accept"),
                           (H_CUSTOM_ATTRIBUTES, "customAttributes")):
        value = headers.get(header)
        if value is not None and len(value) > MAX_HEADER_LENGTH:
            raise runtime_errors.header_too_long(header, member, MAX_HEADER_LENGTH)
        if value is not None and not _ASCII.match(value):
            raise _violation(value, member, r"Member must satisfy regular expression pattern: "
                                            r"\p{ASCII}*")
    inference_id = headers.get(H_INFERENCE_ID)
    if inference_id is not None:
        if len(inference_id) > 64:
            raise runtime_errors.header_too_long(H_INFERENCE_ID, "inferenceId", 64)
        if not TARGET_MODEL.match(inference_id):
            raise _violation(inference_id, "inferenceId", r"Member must satisfy regular "
                                                          r"expression pattern: \A\S[\p{Print}]*\z")
    location = headers.get(H_INPUT_LOCATION)
    if location is not None and (len(location) > 1024 or not _INPUT_LOCATION.match(location)):
        raise _violation(location, "inputLocation", "Member must satisfy regular expression "
                                                    "pattern: ^(https|s3)://([^/]+)/?(.*)$")
    extension = headers.get(H_OUTPUT_EXTENSION)
    if extension is not None and (len(extension) > 512 or not _EXTENSION.match(extension)):
        raise _violation(extension, "s3OutputPathExtension",
                         "Member must satisfy regular expression pattern: "
                         "^(?!s3:|https:)[a-zA-Z0-9!_.*'()/-]+$")
    filename = headers.get(H_FILENAME)
    if filename is not None and (len(filename) > 32 or not _FILENAME.match(filename)):
        raise _violation(filename, "filename", "Member must satisfy regular expression pattern: "
                                               r"^(?!.*\..*\.)[a-zA-Z0-9][a-zA-Z0-9-_\.]*$")
    ttl = _integer(headers, H_TTL, "requestTTLSeconds", TTL_RANGE, DEFAULT_TTL_S)
    timeout = _integer(headers, H_TIMEOUT, "invocationTimeoutSeconds", TIMEOUT_RANGE,
                       DEFAULT_TIMEOUT_S)
    # botocore: "Body and InputLocation are mutually exclusive. Provide exactly one of them."
    if location is not None and body:
        raise runtime_errors.ValidationError(  # [U] wording
            "Body and InputLocation are mutually exclusive; provide exactly one of them.")
    if location is None and not body:
        raise runtime_errors.ValidationError(  # [U] wording
            "Provide the request payload, either inline as Body (up to 128,000 bytes) or as an "
            "S3 object named by InputLocation.")
    return AsyncInvokeRequest(
        endpoint_name=endpoint_name,
        inference_id=inference_id or str(uuid.uuid4()),  # "SageMaker will generate an identifier"
        content_type=headers.get(H_CONTENT_TYPE),
        accept=headers.get(H_ACCEPT),
        custom_attributes=headers.get(H_CUSTOM_ATTRIBUTES),
        input_location=location,
        output_extension=extension,
        filename=filename,
        ttl_s=ttl,
        timeout_s=timeout,
    ), (None if location is not None else body)


# --- where results and failures go ----------------------------------------------------------


def _join(prefix: str, *parts: str | None) -> str:
    path = prefix.rstrip("/")
    for part in parts:
        if part:
            path += "/" + part.strip("/")
    return path


def output_location(output_config: Mapping[str, Any], request: AsyncInvokeRequest) -> str:
    """``<S3OutputPath>[/<S3OutputPathExtension>]/<Filename or InferenceId.out>``.

    AWS: "If not specified, SageMaker generates a filename based on the inference ID" [U: the
    name is ``<InferenceId>.out``, the ``.out`` suffix AWS's examples show]."""
    name = request.filename or f"{request.inference_id}.out"
    return _join(str(output_config.get("S3OutputPath") or ""), request.output_extension, name)


def failure_location(output_config: Mapping[str, Any], request: AsyncInvokeRequest) -> str:
    """``<S3FailurePath>[/<extension>]/<InferenceId>-error.out``; without an S3FailurePath the
    failure is written beside the output, under the same name [U]."""
    base = output_config.get("S3FailurePath") or output_config.get("S3OutputPath") or ""
    name = f"{request.filename}-error.out" if request.filename else \
        f"{request.inference_id}-error.out"
    return _join(str(base), request.output_extension, name)


def split_s3_url(url: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key`` (or ``https://bucket.../key``)."""
    match = _INPUT_LOCATION.match(url)
    if match is None:
        raise ValueError(f"not an S3 URL: {url}")
    host, key = match.group(2), match.group(3)
    if match.group(1) == "https":  # virtual-hosted style: bucket.s3[.region].amazonaws.com
        host = host.split(".s3", 1)[0]
    return host, key


# --- the SNS notifications ("Check prediction results") -------------------------------------


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def notification(*, region: str, request: AsyncInvokeRequest, received: float, finished: float,
                 succeeded: bool, location: str, response_content_type: str | None,
                 failure_reason: str | None, response_body: bytes | None) -> dict[str, Any]:
    """The message SageMaker publishes to the SuccessTopic or the ErrorTopic, in the shape
    AWS's guide shows (``invocationStatus`` ``Completed`` or ``Failed``); ``response_body``
    (when the topic is listed in IncludeInferenceResponseIn and the answer is at most 128 KB)
    is ``responseBody`` {``content``, ``encoding``} [U: its shape]."""
    request_parameters: dict[str, Any] = {"endpointName": request.endpoint_name}
    if request.content_type is not None:
        request_parameters["contentType"] = request.content_type
    if request.accept is not None:
        request_parameters["accept"] = request.accept
    if request.input_location is not None:
        request_parameters["inputLocation"] = request.input_location
    if request.custom_attributes is not None:
        request_parameters["customAttributes"] = request.custom_attributes
    message: dict[str, Any] = {
        "awsRegion": region,
        "eventTime": _time(finished),
        "receivedTime": _time(received),
        "invocationStatus": "Completed" if succeeded else "Failed",
        "requestParameters": request_parameters,
        "inferenceId": request.inference_id,
        "eventVersion": "1.0",
        "eventSource": "aws:sagemaker",
        "eventName": "InferenceResult",
    }
    response_parameters: dict[str, Any] = {}
    if response_content_type is not None:
        response_parameters["contentType"] = response_content_type
    response_parameters["outputLocation" if succeeded else "failureLocation"] = location
    message["responseParameters"] = response_parameters
    if failure_reason is not None:
        message["failureReason"] = failure_reason
    if response_body is not None and len(response_body) <= MAX_RESPONSE_IN_NOTIFICATION:
        try:
            message["responseBody"] = {"content": response_body.decode("utf-8"),
                                       "encoding": "UTF-8"}
        except UnicodeDecodeError:
            import base64

            message["responseBody"] = {"content": base64.b64encode(response_body).decode(),
                                       "encoding": "BASE64"}
    return message


# --- failure reasons (the failure object's text and the notification's failureReason) -------


def expired_reason(ttl_s: int) -> str:  # [U] wording
    return (f"ClientError: The request expired: it waited in the queue longer than its "
            f"RequestTTLSeconds ({ttl_s} seconds) before an instance could process it.")


def download_failed_reason(location: str, detail: str) -> str:  # [U] wording
    return f"ClientError: Failed to download the request payload from {location}: {detail}"


def model_failure_reason(error: runtime_errors.SageMakerError) -> str:
    """AWS's guide shows ``ClientError: Received server error (500) from model. See the
    SageMaker Endpoint logs in your account for more information.`` for a model's error."""
    if isinstance(error, runtime_errors.ModelError):
        kind = "server" if error.original_status == 0 or error.original_status >= 500 \
            else "client"
        return (f"ClientError: Received {kind} error ({error.original_status}) from model. "
                "See the SageMaker Endpoint logs in your account for more information.")
    return f"{error.shape}: {error.message}"  # [U]


def endpoint_deleted_reason(name: str) -> str:  # [U] wording, and that it fails at all
    return (f"ClientError: The endpoint {name} was deleted before the request was processed. "
            "Invoke an endpoint that is InService; an endpoint created again under the same "
            "name does not take over requests queued for the deleted one.")


def timed_out_reason(timeout_s: int) -> str:  # [U] wording
    return (f"ClientError: The invocation timed out: the model did not answer within its "
            f"InvocationTimeoutSeconds ({timeout_s} seconds).")


# --- refusals of the control plane and the runtime -------------------------------------------


def not_for_multi_model(model_arn: str) -> str:  # [U] wording: AWS publishes none
    return (f'Asynchronous inference is not supported for multi-model endpoints: model '
            f'"{model_arn}" has a container in MultiModel mode. Remove AsyncInferenceConfig '
            "or use a SingleModel container.")


def not_async_endpoint(name: str) -> runtime_errors.ValidationError:  # [U] wording
    return runtime_errors.ValidationError(
        f"Endpoint {name} is not configured for asynchronous inference: its endpoint "
        "configuration has no AsyncInferenceConfig. Use InvokeEndpoint, or create the "
        "endpoint from a configuration with AsyncInferenceConfig.")


def not_for_inference_components(name: str) -> runtime_errors.ValidationError:  # [U] wording
    return runtime_errors.ValidationError(
        f"Endpoint {name} hosts inference components, and InvokeEndpointAsync cannot name one: "
        "its request has no InferenceComponentName member. Invoke the component with "
        "InvokeEndpoint and InferenceComponentName, or deploy its model on an endpoint of its "
        "own (a ProductionVariant with ModelName) whose configuration has AsyncInferenceConfig.")


def missing_output_path() -> str:  # [U]: the model requires neither path
    return ("AsyncInferenceConfig.OutputConfig.S3OutputPath is required: it is where "
            "asynchronous inference writes each response.")


def max_concurrency(config: Mapping[str, Any]) -> int:
    client = config.get("ClientConfig") or {}
    value = client.get("MaxConcurrentInvocationsPerInstance")
    return int(value) if value else DEFAULT_MAX_CONCURRENT_PER_INSTANCE
