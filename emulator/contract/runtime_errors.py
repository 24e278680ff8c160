"""The sagemaker-runtime error table and every error message, in one place.

Shapes, status codes and members follow botocore's service model for sagemaker-runtime
(``tests/unit/test_contract_errors.py`` checks this table against it). Messages marked [O] were
observed from the real service; those marked [U] are our most plausible guess, easy to change here.

botocore reads the error code from the ``x-amzn-ErrorType`` header, the message from ``Message``,
and re-parses the body with the error shape, so ModelError's ``OriginalStatusCode`` and
``OriginalMessage`` appear at the top level of ``ClientError.response``.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Sequence
from typing import Any, ClassVar


class SageMakerError(Exception):
    shape: ClassVar[str] = "InternalFailure"
    status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        # The emulator's own words beside AWS's (contract/runtime.py sends them as a header of
        # their own): never part of the message a client compares with AWS's.
        self.hint: str | None = None

    def members(self) -> dict[str, Any]:
        return {"Message": self.message}

    def headers(self) -> dict[str, str]:
        return {"x-amzn-ErrorType": self.shape}


class ValidationError(SageMakerError):
    """What SageMaker's front end decides before any container sees the request."""

    shape = "ValidationError"
    status = 400


class ModelError(SageMakerError):
    """The container answered with an error (or timed out: OriginalStatusCode 0)."""

    shape = "ModelError"
    status = 424

    def __init__(self, message: str, original_status: int, original_message: str,
                 log_stream_arn: str) -> None:
        super().__init__(message)
        self.original_status = original_status
        self.original_message = original_message
        self.log_stream_arn = log_stream_arn
        # How long the model took to give this answer (None: it gave none, e.g. timed out).
        self.model_latency_s: float | None = None

    def members(self) -> dict[str, Any]:
        return {
            "Message": self.message,
            "OriginalStatusCode": self.original_status,
            "OriginalMessage": self.original_message,
            "LogStreamArn": self.log_stream_arn,
        }


class ModelNotReadyException(SageMakerError):
    """The model is still downloading or loading past the invocation timeout."""

    shape = "ModelNotReadyException"
    status = 429


class InternalFailure(SageMakerError):
    shape = "InternalFailure"
    status = 500


class ServiceUnavailable(SageMakerError):
    shape = "ServiceUnavailable"
    status = 503


class InternalDependencyException(SageMakerError):
    shape = "InternalDependencyException"
    status = 530


ERROR_TABLE: tuple[type[SageMakerError], ...] = (
    ValidationError, ModelError, ModelNotReadyException, InternalFailure, ServiceUnavailable,
    InternalDependencyException,
)



@functools.cache
def error_class(shape: str, status: int) -> type[SageMakerError]:
    """The runtime's error of any code it may answer (its model's, or an error every AWS API
    may answer, such as ThrottlingException), with that status: a fault rule's answer."""
    known = next((c for c in ERROR_TABLE if c.shape == shape and c.status == status), None)
    return known or type(shape, (SageMakerError,), {"shape": shape, "status": status})


# --- Messages -------------------------------------------------------------------------------

def endpoint_not_found(name: str, account: str) -> ValidationError:  # [O]
    return ValidationError(f"Endpoint {name} of account {account} not found.")


def missing_target_model(request_id: str) -> ValidationError:  # [O], text after it truncated
    return ValidationError(f"Request {request_id} is missing a target model header.")


def not_multi_model(name: str) -> ValidationError:  # [O]
    return ValidationError(
        f"Endpoint {name} is not a multi-model endpoint and does not support target model header."
    )


def variant_not_found(variant: str, endpoint: str) -> ValidationError:  # [U]
    return ValidationError(f"Variant {variant} not found for endpoint {endpoint}.")


def no_variant_weight(endpoint: str) -> ValidationError:  # [U] refused earlier by the control plane
    return ValidationError(
        f"Endpoint {endpoint} has no production variant with a weight above 0; name one with "
        "TargetVariant, or give a variant weight with UpdateEndpointWeightsAndCapacities.")


def inference_component_required() -> ValidationError:  # [O] quoted in user reports (#30)
    return ValidationError(
        "Inference Component Name header is required for endpoints to which you plan to deploy "
        "inference components. Please include Inference Component Name header or consider "
        "using SageMaker models.")


def inference_component_not_found(component: str, endpoint: str) -> ValidationError:  # [U]
    return ValidationError(
        f"Inference component {component} was not found on endpoint {endpoint}.")


def inference_component_no_capacity(component: str, status: str) -> ValidationError:
    """A call that finds no copy of ``component`` (``status``, 0 ready copies). [O] AWS's
    words, quoted in aws-samples/sagemaker-genai-hosting-examples
    03-features/autoscaling/scale_down_to_zero.ipynb: they name neither."""
    return ValidationError(
        "Inference Component has no capacity to process this request. ApplicationAutoScaling "
        "may be in-progress (if configured) or try to increase the capacity by invoking "
        "UpdateInferenceComponentRuntimeConfig API.")


def inference_component_copies_failed(component: str, reason: str) -> ServiceUnavailable:  # [U]
    return ServiceUnavailable(
        f"Inference component {component} has no copy in service: its copies failed to start: "
        f"{reason}")


def invalid_target_model(value: str, reason: str) -> ValidationError:  # [U]
    return ValidationError(
        f"1 validation error detected: Value '{value}' at 'targetModel' failed to satisfy "
        f"constraint: {reason}"
    )


def header_too_long(header: str, member: str, limit: int) -> ValidationError:  # [U]
    return ValidationError(
        f"1 validation error detected: Value at '{member}' (header {header}) failed to satisfy "
        f"constraint: Member must have length less than or equal to {limit}"
    )


def target_model_not_found(target: str, location: str,
                           stored: Sequence[str] | None = None) -> ValidationError:  # [U]
    """AWS's words (which call any store a bucket), and the emulator's hint: what the store,
    when it is a local folder (``stored``: the paths of its files), holds instead."""
    error = ValidationError(f"Failed to download model data(bucket: {location}, key: {target}). "
                            "Please ensure that there is an object located at the URL and that "
                            "the role passed to CreateModel has permissions to download the "
                            "model.")
    error.hint = not_found_hint(target, location, stored)
    return error


def not_found_hint(target: str, location: str, stored: Sequence[str] | None) -> str:
    if stored is None:
        return f"no object {target} under {location}"
    hint = (f"no file {target} in the model folder {location} (the 'bucket' of the message; "
            f"TargetModel is a file's path in it)")
    close = difflib.get_close_matches(target, stored, n=1, cutoff=0.6)
    if close:
        hint += f"; did you mean {close[0]}?"
    if not stored:
        return hint + "; the folder holds no file"
    shown = ", ".join(stored[:HINT_LISTED]) + (", ..." if len(stored) > HINT_LISTED else "")
    return hint + f"; it holds {len(stored)}: {shown}"


HINT_LISTED = 10  # files a not-found hint names


def oversize_body(request_id: str, limit: int) -> ValidationError:  # [O] serverless; [U] real-time
    return ValidationError(f"Request {request_id} has oversize body. "
                           f"The maximum payload size is {limit} bytes.")


def model_error(status: int, body: str, endpoint: str, region: str, account: str,
                log_stream_arn: str) -> ModelError:  # [O]
    kind = "client" if 400 <= status < 500 else "server"
    message = (
        f'Received {kind} error ({status}) from primary with message "{body}". See '
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
        f"#logEventViewer:group=/aws/sagemaker/Endpoints/{endpoint} in account {account} "
        "for more information."
    )
    return ModelError(message, status, body, log_stream_arn)


def invocation_timed_out(endpoint: str, region: str, account: str,
                         log_stream_arn: str) -> ModelError:  # [O]: OriginalStatusCode 0
    body = ("Your invocation timed out while waiting for a response from container primary. "
            "Review the latency metrics for each container in Amazon CloudWatch, resolve the "
            "issue, and try again.")
    return model_error(0, body, endpoint, region, account, log_stream_arn)


def unsupported_for_multi_model(operation: str, name: str) -> ValidationError:  # [U]
    return ValidationError(
        f"{operation} is not supported for endpoint {name}: multi-model endpoints are invoked "
        "with InvokeEndpoint and a TargetModel (this operation has no TargetModel member).")


def model_not_ready(target: str) -> ModelNotReadyException:  # [U]
    return ModelNotReadyException(
        f"Model {target} is not ready yet: it is still being downloaded or loaded. "
        "Retry the request; loading continues in the background."
    )


def log_stream_arn(region: str, account: str, endpoint: str) -> str:  # [U] format
    return (f"arn:aws:logs:{region}:{account}:log-group:/aws/sagemaker/Endpoints/{endpoint}"
            ":log-stream:AllTraffic/local")
