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
Every request also carries the global keys aws:SourceIp, aws:CurrentTime, aws:EpochTime,
aws:SecureTransport, aws:RequestedRegion and the principal's (added by the middleware).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, unquote

from emulator.auth.errors import Protocol

RUNTIME_OPERATIONS = {
    "invocations": "InvokeEndpoint",
    "invocations-response-stream": "InvokeEndpointWithResponseStream",
    "async-invocations": "InvokeEndpointAsync",
}
CBOR_PREFIX = "/service/GraniteServiceVersion20100801/operation/"

# Control-plane parameter -> resource type in the ARN. The first one present names the resource.
_RESOURCE_PARAMS = (("EndpointName", "endpoint"), ("EndpointConfigName", "endpoint-config"),
                    ("ModelName", "model"))


@dataclass(frozen=True)
class ApiCall:
    """One request as IAM sees it."""

    service: str  # the SigV4 signing name: sagemaker, application-autoscaling, monitoring
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
             account: str) -> ApiCall | None:
    """The API call, or None for the emulator's own routes (``/ping``, ``/_emulator/...``).

    ``headers`` have lowercased names; ``path`` is decoded (what the route sees).
    """
    target = headers.get("x-amz-target", "")
    if method == "POST" and path.startswith("/endpoints/"):
        parts = path[len("/endpoints/"):].split("/")
        if len(parts) == 2 and parts[1] in RUNTIME_OPERATIONS and parts[0]:
            return ApiCall(
                service="sagemaker", action=f"sagemaker:{RUNTIME_OPERATIONS[parts[1]]}",
                resource=sagemaker_arn("endpoint", parts[0], region, account),
                protocol=Protocol.REST_JSON,
                keys={"sagemaker:TargetModel": _header(headers, "x-amzn-sagemaker-target-model"),
                      "sagemaker:TargetContainerHostname":
                          _header(headers, "x-amzn-sagemaker-target-container-hostname")})
    if method == "POST" and path.startswith(CBOR_PREFIX):
        operation = path[len(CBOR_PREFIX):]
        return ApiCall("monitoring", f"cloudwatch:{operation}", "*", Protocol.CBOR)
    if method == "POST" and target.startswith("SageMaker."):
        operation = target[len("SageMaker."):]
        params = _json_object(body)
        return ApiCall("sagemaker", f"sagemaker:{operation}",
                       _control_resource(operation, params, region, account), Protocol.JSON,
                       _control_keys(operation, params))
    if method == "POST" and target.startswith("AnyScaleFrontendService."):
        return ApiCall("application-autoscaling",
                       f"application-autoscaling:{target.split('.', 1)[1]}", "*", Protocol.JSON)
    if method == "POST" and target.startswith("GraniteServiceVersion20100801."):
        return ApiCall("monitoring", f"cloudwatch:{target.split('.', 1)[1]}", "*", Protocol.JSON)
    if path == "/" and "form-urlencoded" in headers.get("content-type", ""):
        action = parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]
        if action:
            return ApiCall("monitoring", f"cloudwatch:{action}", "*", Protocol.QUERY)
    return None


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


def decoded_path(raw_path: bytes) -> str:
    return unquote(raw_path.decode("latin-1"))
