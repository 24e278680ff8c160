"""Which API a request is, and so which IAM action, resource ARN and condition keys it carries.

Forms and ARNs from the Service Authorization Reference ("Actions, resources, and condition keys
for Amazon SageMaker", "... Application Auto Scaling", "... Amazon CloudWatch"):
- sagemaker-runtime: ``POST /endpoints/{name}/invocations`` -> ``sagemaker:InvokeEndpoint``
  (also ``invocations-response-stream`` -> InvokeEndpointWithResponseStream, ``async-invocations``
  -> InvokeEndpointAsync) on ``arn:aws:sagemaker:<region>:<account>:endpoint/<name>``, the name
  lowercased as SageMaker's ARNs are (observed: endpoint "setu4993--LaBSE" is denied on
  ".../endpoint/endpoint-setu4993--labse", philschmid/cdk-samples#2); condition keys
  ``sagemaker:TargetModel`` and ``sagemaker:TargetContainerHostname`` from their headers.
- SageMaker control plane: ``POST /`` + ``X-Amz-Target: SageMaker.<Op>`` -> ``sagemaker:<Op>`` on
  the ARN its parameters name (model/, endpoint-config/, endpoint/), ``*`` for List*.
- Application Auto Scaling: ``X-Amz-Target: AnyScaleFrontendService.<Op>``, resource ``*``.
- CloudWatch: ``POST /service/GraniteServiceVersion20100801/operation/<Op>`` (smithy RPC v2 CBOR),
  ``X-Amz-Target: GraniteServiceVersion20100801.<Op>`` (JSON 1.0) or ``Action=<Op>`` (query);
  ``cloudwatch:<Op>`` on ``*`` [U] (alarms have ARNs, but the emulator maps every operation to *).
- the emulator's own data routes (``contract/apis.py``): ``emulator:DescribeModels`` (the fleet
  and its models: ``/_emulator/models``, the page's state and stream) and ``emulator:GetMetrics``
  (``/_emulator/metrics``) on ``*``; ``emulator:UnloadModel`` on the endpoint's ARN with
  ``sagemaker:TargetModel``, so a tenant's TargetModel conditions cover it too.
Every request also carries the global keys aws:SourceIp, aws:CurrentTime, aws:EpochTime,
aws:SecureTransport, aws:RequestedRegion and the principal's (added by the middleware).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from emulator.contract.apis import (
    ApiRequest,
    Protocol,
    Service,
    identify,
    parse_form,
    with_form,
)
from emulator.contract.request_compression import TooLarge, Undecodable, inflate

# A compressed form body is read inflated, up to this (the APIs' own bound on a body).
_MAX_INFLATED_FORM = 8 * 1024 * 1024

# Control-plane parameter -> resource type in the ARN. The first one present names the resource.
# An inference component's operations act on the component (CreateInferenceComponent names its
# endpoint too, but the resource it creates is the component).
_RESOURCE_PARAMS = (("InferenceComponentName", "inference-component"), ("EndpointName", "endpoint"),
                    ("EndpointConfigName", "endpoint-config"), ("ModelName", "model"))


@dataclass(frozen=True)
class ApiCall:
    """One request as IAM sees it."""

    # the SigV4 signing name: sagemaker, application-autoscaling, monitoring; "" for any
    service: str
    action: str  # e.g. sagemaker:InvokeEndpoint
    resource: str  # an ARN or *
    protocol: Protocol
    # Condition keys of the request; None: a key this call may carry but this request does not.
    keys: Mapping[str, str | list[str] | None] = field(default_factory=dict)


def sagemaker_arn(kind: str, name: str, region: str, account: str) -> str:
    return f"arn:aws:sagemaker:{region}:{account}:{kind}/{name.lower()}"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value if value else None


def classify(method: str, path: str, headers: Mapping[str, str], body: bytes, region: str,
             account: str, api: ApiRequest | None = None) -> ApiCall | None:
    """The API call, or None for what is no API (``/ping``, the page's files, unknown paths).

    ``headers`` are canonical (each name once, lower-case; ``contract/apis.py``); ``path`` is
    decoded (what the route sees). ``api`` is the front door's reading of the request, when it
    has made one; otherwise it is made here, by the same function. A form body that repeats a
    parameter raises ``RepeatedParameter``.
    """
    api = api or identify(method, path, headers)
    if api is None:
        return None
    if api.protocol is Protocol.QUERY:
        api = with_form(api, parse_form(_plain(body, headers)))
        if not api.operation:
            return None  # no Action: the service answers that itself, and runs nothing
    keys: dict[str, str | list[str] | None] = {}
    resource = "*"
    if api.service is Service.RUNTIME and api.endpoint is not None:
        resource = sagemaker_arn("endpoint", api.endpoint, region, account)
        keys = {"sagemaker:TargetModel": _header(headers, "x-amzn-sagemaker-target-model"),
                "sagemaker:TargetContainerHostname":
                    _header(headers, "x-amzn-sagemaker-target-container-hostname")}
    elif api.service is Service.SAGEMAKER:
        params = _json_object(body)
        resource = _control_resource(api.operation, params, region, account)
        keys = dict(_control_keys(api.operation, params))
    elif api.service is Service.EMULATOR and api.endpoint is not None:
        resource = sagemaker_arn("endpoint", api.endpoint, region, account)
        keys = {"sagemaker:TargetModel": api.target_model}
    return ApiCall(api.service.signing_name, api.action, resource, api.protocol, keys)


def _plain(body: bytes, headers: Mapping[str, str]) -> bytes:
    """A form body as written (``Content-Encoding: gzip`` undone: botocore compresses
    PutMetricData), so IAM reads the same Action the service runs."""
    try:
        return inflate(body, headers, _MAX_INFLATED_FORM)
    except (TooLarge, Undecodable):
        return b""  # the service refuses it too, and runs nothing


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError):
        return {}  # the control plane answers SerializationException itself, after auth
    return value if isinstance(value, dict) else {}


def _control_resource(operation: str, params: dict[str, Any], region: str, account: str) -> str:
    if operation.startswith("List"):
        return "*"
    if operation in ("AddTags", "DeleteTags") and isinstance(params.get("ResourceArn"), str):
        arn: str = params["ResourceArn"]
        return arn
    for param, kind in _RESOURCE_PARAMS:
        if isinstance(params.get(param), str):
            return sagemaker_arn(kind, params[param], region, account)
    return "*"


def _control_keys(operation: str, params: dict[str, Any]) -> dict[str, str | list[str]]:
    """The request's own condition keys, for the parameters the emulator's operations take."""
    keys: dict[str, str | list[str]] = {}
    tags = params.get("Tags")
    if isinstance(tags, list):
        pairs = [t for t in tags if isinstance(t, dict) and isinstance(t.get("Key"), str)]
        keys["aws:TagKeys"] = [t["Key"] for t in pairs]
        for tag in pairs:
            keys[f"aws:RequestTag/{tag['Key']}"] = str(tag.get("Value", ""))
    variants = params.get("ProductionVariants")
    if operation == "CreateEndpointConfig" and isinstance(variants, list):
        types = [v["InstanceType"] for v in variants
                 if isinstance(v, dict) and isinstance(v.get("InstanceType"), str)]
        if types:
            keys["sagemaker:InstanceTypes"] = types
    if operation == "CreateModel":
        if "EnableNetworkIsolation" in params:
            keys["sagemaker:NetworkIsolation"] = str(bool(params["EnableNetworkIsolation"])).lower()
        vpc = params.get("VpcConfig")
        if isinstance(vpc, dict):
            keys["sagemaker:VpcSubnets"] = [str(s) for s in vpc.get("Subnets", [])]
            keys["sagemaker:VpcSecurityGroupIds"] = [str(s) for s in vpc.get("SecurityGroupIds",
                                                                              [])]
    return keys


def global_keys(client_ip: str | None, region: str, now: datetime | None = None,
                secure: bool = False) -> dict[str, str]:
    now = now or datetime.now(timezone.utc)
    keys = {"aws:CurrentTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "aws:EpochTime": str(int(now.timestamp())),
            "aws:SecureTransport": str(secure).lower(),
            "aws:RequestedRegion": region}
    if client_ip:
        keys["aws:SourceIp"] = client_ip
    return keys
