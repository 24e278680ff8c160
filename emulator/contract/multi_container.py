"""Every message of multi-container endpoints and inference pipelines, in one place.

Wire text only, no behaviour (that is ``emulator.hosting.multi_container``). [O] marks text
observed from the real service, [D] a rule SageMaker documents without publishing its message,
[U] our most plausible wording.
"""

from __future__ import annotations

from emulator.contract import runtime_errors

# The SageMaker documentation's limit, also botocore's max for ``Containers``.
MAX_CONTAINERS = 15

# Header of InvokeEndpoint's TargetContainerHostname (botocore's sagemaker-runtime model).
H_TARGET_CONTAINER_HOSTNAME = "x-amzn-sagemaker-target-container-hostname"


def container_label(hostname: str | None, index: int) -> str:
    """How messages and metrics name a container: its ContainerHostname, else its position.

    [U] SageMaker names the one container of a single-container endpoint "primary" in its
    ModelError messages; unnamed pipeline containers are ``container-1``, ``container-2`` ...
    """
    return hostname or f"container-{index + 1}"


# --- InvokeEndpoint: the three ValidationErrors the documentation lists [D] ----------------

def unknown_container_hostname(  # [D] rule, [U] text
        hostname: str, endpoint: str, known: list[str]) -> runtime_errors.ValidationError:
    return runtime_errors.ValidationError(
        f"TargetContainerHostname {hostname} does not exist in endpoint {endpoint}; its "
        f"containers are {', '.join(known)}.")


def missing_container_hostname(  # [D]
        endpoint: str, known: list[str]) -> runtime_errors.ValidationError:
    return runtime_errors.ValidationError(
        f"Endpoint {endpoint} is configured for direct invocation: specify "
        f"TargetContainerHostname (one of {', '.join(known)}).")


def hostname_on_non_direct(endpoint: str) -> runtime_errors.ValidationError:  # [D] rule, [U] text
    return runtime_errors.ValidationError(
        f"Endpoint {endpoint} is not configured for direct invocation and does not support "
        "the TargetContainerHostname header; remove it, or create the model with "
        "InferenceExecutionConfig={'Mode': 'Direct'}.")


def invalid_container_hostname(  # [U] as other members
        value: str) -> runtime_errors.ValidationError:
    return runtime_errors.ValidationError(
        f"1 validation error detected: Value '{value[:80]}' at 'targetContainerHostname' failed "
        "to satisfy constraint: Member must satisfy regular expression pattern: "
        "^[a-zA-Z0-9](-*[a-zA-Z0-9])* and have length less than or equal to 63")


def container_model_error(status: int, body: str, container: str, endpoint: str, region: str,
                          account: str, log_stream_arn: str) -> runtime_errors.ModelError:
    """As ``runtime_errors.model_error`` [O] (which names the container "primary"), naming the
    container of a multi-container endpoint that failed [U]."""
    kind = "client" if 400 <= status < 500 else "server"
    message = (
        f'Received {kind} error ({status}) from {container} with message "{body}". See '
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
        f"#logEventViewer:group=/aws/sagemaker/Endpoints/{endpoint} in account {account} "
        "for more information."
    )
    return runtime_errors.ModelError(message, status, body, log_stream_arn)


def container_timed_out(container: str) -> str:  # [O] with "primary" for one container
    return (f"Your invocation timed out while waiting for a response from container "
            f"{container}. Review the latency metrics for each container in Amazon CloudWatch, "
            "resolve the issue, and try again.")


# --- CreateModel -------------------------------------------------------------------------------

def multi_model_in_pipeline() -> str:  # [O]
    return "More than one container in MultiModel mode is not supported with inference pipeline."


def multi_model_with_others() -> str:  # [U] SageMaker accepts one; the emulator does not run it
    return ("A container in MultiModel mode cannot be part of a multi-container model in the "
            "emulator: host the multi-model container on its own endpoint (PrimaryContainer), "
            "or give every container Mode SingleModel.")


def duplicate_hostname(hostname: str) -> str:  # [D] "unique", [U] text
    return (f"ContainerHostname {hostname} is used by more than one container; every container "
            "of a model needs its own ContainerHostname.")


def hostname_required_for_direct() -> str:  # [D], [U] text
    return "ContainerHostname must be specified for every container in Direct mode."


def image_not_found(image: str, hint: str) -> str:  # [U]
    return f"Requested image {image} not found: {hint}"


# --- CreateEndpoint: FailureReason ------------------------------------------------------------

def failed_ping(container: str, variant: str, detail: str) -> str:  # [O] for "primary", [U] others
    return (f"The {container} container for production variant {variant} did not pass the "
            f"ping health check. Please check CloudWatch logs for this endpoint. ({detail})")
