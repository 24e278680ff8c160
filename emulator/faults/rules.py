"""A fault rule as a test writes it (``POST /_emulator/faults``), read and checked once.

A rule is a ``match`` (which calls), a ``fault`` (what they get instead) and when it fires: a
``probability`` drawn from the rule's own seeded generator (so a run repeats), a ``count`` (how
many times at most) and ``expires_in_s``. Every field of ``match`` is optional; a rule that could
never match (an operation the service does not have, an error code the operation cannot answer,
a runtime-only field on another service) is refused here with what to fix, never stored.

Faults (docs/faults.md):
- ``{"error": "ThrottlingException"}`` or ``{"error": {"code": ..., "message": ...}}``: the call
  is answered with that error, in the service's own error shape and with the status botocore's
  model gives it (the operation's modeled errors, and the errors every AWS API may answer);
- ``{"model_error": {"status": 500, "message": "..."}}``: InvokeEndpoint answered as a container
  that answered ``status`` (SageMaker's ModelError, OriginalStatusCode ``status``);
- ``{"latency_ms": 300}`` or ``{"latency_ms": {"p50": 100, "p99": 900}}`` (a log-normal with
  those percentiles): the whole call takes that much longer (OverheadLatency moves);
- ``{"model_latency_ms": ...}``: the model's part of InvokeEndpoint takes that much longer
  (ModelLatency moves);
- ``{"load": {"fail": "..."}}``, ``{"load": {"delay_s": 30}}``, ``{"load": "out_of_memory"}``,
  ``{"load": "disk_full"}``: the model's load that the call needs fails as Triton's refusal,
  takes longer, fails out of memory or finds the disk full (drawn when a load starts);
- ``{"download": {"break_after_bytes": N}}`` / ``{"stall_after_bytes": N}``: the model's
  download breaks there (a connection reset), or stalls there while the rule is in force;
- ``{"instance": "kill"}`` / ``{"instance": {"hang_s": 10}}``: the instance that would answer
  the call has its Triton killed, or stopped for that long, before the call reaches it;
- ``{"capacity": "insufficient"}`` / ``{"capacity": {"slow_start_s": 60}}``: instances added to
  a variant (CreateEndpoint, a deployment's new fleet, a scale-out) or copies added to an
  inference component cannot be provisioned, or start that much later; matched by endpoint,
  variant and inference component only.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from emulator.contract.botocore_validation import service_model

RUNTIME = "sagemaker-runtime"
INVOKE = "InvokeEndpoint"
# The services a rule may name, by the name botocore (and the front door) gives them.
SERVICES = (RUNTIME, "sagemaker", "application-autoscaling", "cloudwatch")
# Match fields only an InvokeEndpoint has (the serving unit is chosen by then).
INVOKE_ONLY = ("variant", "instance", "target_model", "inference_component")
MATCH_FIELDS = ("endpoint", *INVOKE_ONLY, "service", "operation")
RULE_FIELDS = ("match", "fault", "probability", "count", "expires_in_s", "seed")
FAULT_KINDS = ("error", "model_error", "latency_ms", "model_latency_ms", "load", "download",
               "instance", "capacity")
# Kinds that act on the model or the instance behind an InvokeEndpoint, not on its answer alone.
INVOKE_ONLY_KINDS = ("model_error", "model_latency_ms", "load", "download", "instance")
# A capacity fault meets instances being added, whatever call or engine adds them: it matches
# by the variant they are added to only.
CAPACITY_MATCH = ("endpoint", "variant", "inference_component")
# Kinds a later version may inject; named so that a rule asking for one is told so.
NOT_YET: tuple[str, ...] = ()
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile

# Errors any call of a service may answer besides its operation's own (AWS's common errors),
# with their HTTP status.
COMMON_ERRORS: Mapping[str, Mapping[str, int]] = {
    RUNTIME: {"ThrottlingException": 400, "ServiceUnavailable": 503, "InternalFailure": 500},
    "sagemaker": {"ThrottlingException": 400, "ServiceUnavailable": 503,
                  "InternalFailure": 500, "ValidationException": 400},
    "application-autoscaling": {"ThrottlingException": 400, "ServiceUnavailable": 503,
                                "InternalFailure": 500},
    "cloudwatch": {"Throttling": 400, "ThrottlingException": 400, "ServiceUnavailable": 503,
                   "InternalFailure": 500},
}
# What the client reads when the rule names no message [U: AWS's own texts where known].
DEFAULT_MESSAGES: Mapping[str, str] = {
    "ThrottlingException": "Rate exceeded", "Throttling": "Rate exceeded",
    "ServiceUnavailable": "Service Unavailable", "InternalFailure": "Internal Failure",
}


class RuleError(ValueError):
    """A rule that cannot be stored; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What a call is, as far as rules match it."""

    service: str
    operation: str
    endpoint: str | None = None
    variant: str | None = None
    instance: str | None = None
    target_model: str | None = None
    inference_component: str | None = None


@dataclass(frozen=True, slots=True)
class Match:
    endpoint: str | None = None
    variant: str | None = None
    instance: str | None = None
    target_model: str | None = None  # a glob
    inference_component: str | None = None
    service: str | None = None
    operation: str | None = None

    def covers(self, call: CallFacts) -> bool:
        return ((self.service is None or self.service == call.service)
                and (self.operation is None or self.operation == call.operation)
                and (self.endpoint is None or self.endpoint == call.endpoint)
                and (self.variant is None or self.variant == call.variant)
                and (self.instance is None or self.instance == call.instance)
                and (self.inference_component is None
                     or self.inference_component == call.inference_component)
                and (self.target_model is None or (
                    call.target_model is not None
                    and fnmatch.fnmatchcase(call.target_model, self.target_model))))

    def as_dict(self) -> dict[str, str]:
        return {name: value for name in MATCH_FIELDS
                if (value := getattr(self, name)) is not None}


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    code: str
    status: int
    message: str


@dataclass(frozen=True, slots=True)
class ModelErrorAnswer:
    status: int  # what the container answered: the ModelError's OriginalStatusCode
    message: str


@dataclass(frozen=True, slots=True)
class Latency:
    """A delay in seconds: fixed (p50 == p99) or log-normal with those percentiles."""

    p50_s: float
    p99_s: float
    on_model: bool  # the model's part of the call (ModelLatency), else the whole call

    def draw(self, rng: random.Random) -> float:
        if self.p99_s <= self.p50_s or self.p50_s <= 0:
            return self.p50_s
        sigma = (math.log(self.p99_s) - math.log(self.p50_s)) / _Z99
        return rng.lognormvariate(math.log(self.p50_s), sigma)


@dataclass(frozen=True, slots=True)
class LoadFault:
    """The model's load: fails with ``fail`` (Triton's refusal), fails out of memory (507),
    finds the disk full (507), or takes ``delay_s`` longer."""

    fail: str | None = None
    out_of_memory: bool = False
    disk_full: bool = False
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class DownloadFault:
    """The model's download from its store breaks (a connection reset) after ``after_bytes``,
    or stalls there for as long as the rule is in force."""

    after_bytes: int
    stall: bool


@dataclass(frozen=True, slots=True)
class InstanceFault:
    """The instance that would answer the call: its Triton killed, or stopped for ``hang_s``."""

    kill: bool
    hang_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CapacityFault:
    """Instances added to a variant (CreateEndpoint, a deployment's new fleet, a scale-out):
    none can be provisioned (``insufficient``), or they start ``slow_start_s`` later."""

    insufficient: bool
    slow_start_s: float = 0.0


Fault = (ErrorAnswer | ModelErrorAnswer | Latency | LoadFault | DownloadFault | InstanceFault
         | CapacityFault)
# Where a fault acts: on the call ("call"), on the load it needs, on the download it needs, on
# instances being added.
STAGES = {LoadFault: "load", DownloadFault: "download", CapacityFault: "capacity"}


def stage_of(fault: Fault) -> str:
    return STAGES.get(type(fault), "call")


@dataclass(frozen=True, slots=True)
class FaultRule:
    match: Match
    fault: Fault
    probability: float = 1.0
    count: int | None = None
    expires_in_s: float | None = None
    seed: int = 0
    source: Mapping[str, Any] | None = None  # the rule as written, given back by GET


def parse_rule(data: Any) -> FaultRule:
    """The rule in a ``POST /_emulator/faults`` body, or ``RuleError`` saying what to fix."""
    if not isinstance(data, dict):
        raise RuleError('A fault rule is a JSON object: {"match": {...}, "fault": {...}}.')
    _no_unknown(data, RULE_FIELDS, "the rule")
    fault_data = data.get("fault")
    if isinstance(fault_data, dict) and list(fault_data) == ["capacity"]:
        return _finish(data, _capacity_match(data.get("match", {})),
                       _capacity(fault_data["capacity"]))
    match = _parse_match(data.get("match", {}))
    fault = _parse_fault(fault_data, match)
    if _invoke_only(fault):
        match = dataclasses.replace(match, service=RUNTIME, operation=INVOKE)  # its only call
    return _finish(data, match, fault)


def _finish(data: dict[str, Any], match: Match, fault: Fault) -> FaultRule:
    """The rule with when it fires: probability, count, expiry, seed."""
    probability = _number(data.get("probability", 1.0), "probability")
    if not 0 < probability <= 1:
        raise RuleError(f"probability must be above 0 and at most 1 (got {probability}).")
    count = data.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)
                              or count < 1):
        raise RuleError(f"count must be a whole number of at least 1, or left out for no "
                        f"limit (got {count!r}).")
    expires = data.get("expires_in_s")
    if expires is not None and _number(expires, "expires_in_s") <= 0:
        raise RuleError(f"expires_in_s must be above 0, or left out (got {expires!r}).")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise RuleError(f"seed must be a whole number (got {seed!r}).")
    return FaultRule(match, fault, probability, count,
                     None if expires is None else float(expires), seed, data)


def _seconds(value: Any, where: str) -> float:
    seconds = _number(value, where)
    if seconds <= 0:
        raise RuleError(f"{where} must be above 0 (got {seconds}).")
    return seconds


def _capacity_match(data: Any) -> Match:
    if not isinstance(data, dict):
        raise RuleError(f"match is a JSON object; a capacity fault matches by "
                        f"{' and '.join(CAPACITY_MATCH)}.")
    _no_unknown(data, CAPACITY_MATCH, "match of a capacity fault (it meets instances being "
                                      "added, whatever adds them)")
    for name, value in data.items():
        if not isinstance(value, str) or not value:
            raise RuleError(f"match.{name} must be a non-empty string (got {value!r}).")
    return Match(endpoint=data.get("endpoint"), variant=data.get("variant"),
                 inference_component=data.get("inference_component"))


def _capacity(value: Any) -> CapacityFault:
    if value == "insufficient":
        return CapacityFault(insufficient=True)
    if isinstance(value, dict) and set(value) == {"slow_start_s"}:
        return CapacityFault(False, _seconds(value["slow_start_s"], "fault.capacity.slow_start_s"))
    raise RuleError('fault.capacity is "insufficient" or {"slow_start_s": 60}.')


def _invoke_only(fault: Fault) -> bool:
    """A fault only InvokeEndpoint meets: a container's error, the model's latency, its load,
    its download, its instance."""
    if isinstance(fault, Latency):
        return fault.on_model
    return not isinstance(fault, (ErrorAnswer, CapacityFault))


def _no_unknown(data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise RuleError(f"{where} has no field {', '.join(map(repr, unknown))}; its fields are "
                        f"{', '.join(known)}.")


def _number(value: Any, name: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise RuleError(f"{name} must be a number (got {value!r}).")
    return float(value)


def _parse_match(data: Any) -> Match:
    if not isinstance(data, dict):
        raise RuleError("match is a JSON object of optional fields: "
                        f"{', '.join(MATCH_FIELDS)}.")
    _no_unknown(data, MATCH_FIELDS, "match")
    for name, value in data.items():
        if not isinstance(value, str) or not value:
            raise RuleError(f"match.{name} must be a non-empty string (got {value!r}).")
    service, operation = data.get("service"), data.get("operation")
    runtime_fields = [name for name in ("endpoint", *INVOKE_ONLY) if name in data]
    if runtime_fields and service is None:
        service = RUNTIME  # an endpoint's own names: the runtime's calls
    if service is not None and service not in SERVICES:
        raise RuleError(f"match.service {service!r} is not a service the emulator answers; "
                        f"use one of {', '.join(SERVICES)}.")
    if operation is not None:
        service = service or _service_of(operation)
        if operation not in service_model(service).operation_names:
            raise RuleError(f"{service} has no operation {operation!r} (botocore's model); "
                            "name it as boto3's documentation does, e.g. InvokeEndpoint, "
                            "DescribeEndpoint, PutMetricData.")
    if runtime_fields and service != RUNTIME:
        raise RuleError(f"match.{runtime_fields[0]} names an endpoint's call: it applies to "
                        f"{RUNTIME} only (the service is {service}).")
    invoke_fields = [name for name in INVOKE_ONLY if name in data]
    if invoke_fields:
        if operation not in (None, INVOKE):
            raise RuleError(f"match.{invoke_fields[0]} is chosen for InvokeEndpoint only "
                            f"(the operation is {operation}).")
        operation = INVOKE
    glob = data.get("target_model")
    if glob is not None and glob.count("[") != glob.count("]"):
        raise RuleError(f"match.target_model {glob!r} is not a glob: a [ without its ] "
                        "(use * and ? and [...] as in a shell).")
    if glob is not None:
        re.compile(fnmatch.translate(glob))
    return Match(data.get("endpoint"), data.get("variant"), data.get("instance"), glob,
                 data.get("inference_component"), service, operation)


def _service_of(operation: str) -> str:
    owners = [s for s in SERVICES if operation in service_model(s).operation_names]
    if len(owners) == 1:
        return owners[0]
    if not owners:
        raise RuleError(f"No service the emulator answers has an operation {operation!r}; "
                        "name it as boto3's documentation does (e.g. InvokeEndpoint).")
    raise RuleError(f"match.operation {operation!r} is an operation of {' and '.join(owners)}: "
                    "name the service too (match.service).")


def _parse_fault(data: Any, match: Match) -> Fault:
    if not isinstance(data, dict) or len(data) != 1:
        raise RuleError("fault is a JSON object with one of "
                        f"{', '.join(FAULT_KINDS)} (e.g. {{\"error\": \"ThrottlingException\"}}).")
    ((kind, value),) = data.items()
    if kind in NOT_YET:
        raise RuleError(f"fault {kind!r} cannot be injected by this version of the emulator; "
                        f"it injects {', '.join(FAULT_KINDS)}.")
    if kind == "error":
        return _error(value, match)
    if kind in INVOKE_ONLY_KINDS and (
            match.service not in (None, RUNTIME) or match.operation not in (None, INVOKE)):
        raise RuleError(f"fault {kind} applies to InvokeEndpoint only; match the runtime's "
                        "InvokeEndpoint (or leave service and operation out).")
    if kind == "model_error":
        return _model_error(value)
    if kind in ("latency_ms", "model_latency_ms"):
        return _latency(value, kind)
    if kind == "load":
        return _load(value)
    if kind == "download":
        return _download(value)
    if kind == "instance":
        return _instance(value)
    raise RuleError(f"fault has no kind {kind!r}; use one of {', '.join(FAULT_KINDS)}.")


def _load(value: Any) -> LoadFault:
    if value == "out_of_memory":
        return LoadFault(out_of_memory=True)
    if value == "disk_full":
        return LoadFault(disk_full=True)
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("fail"), str):
        return LoadFault(fail=value["fail"])
    if isinstance(value, dict) and len(value) == 1 and "delay_s" in value:
        return LoadFault(delay_s=_seconds(value["delay_s"], "fault.load.delay_s"))
    raise RuleError('fault.load is {"fail": "message"}, {"delay_s": 30}, "out_of_memory" or '
                    '"disk_full".')


def _download(value: Any) -> DownloadFault:
    if isinstance(value, dict) and len(value) == 1:
        ((name, after),) = value.items()
        if name in ("break_after_bytes", "stall_after_bytes"):
            if not isinstance(after, int) or isinstance(after, bool) or after < 0:
                raise RuleError(f"fault.download.{name} is a number of bytes, at least 0 "
                                f"(got {after!r}).")
            return DownloadFault(after, stall=name == "stall_after_bytes")
    raise RuleError('fault.download is {"break_after_bytes": N} or {"stall_after_bytes": N}.')


def _instance(value: Any) -> InstanceFault:
    if value == "kill":
        return InstanceFault(kill=True)
    if isinstance(value, dict) and set(value) == {"hang_s"}:
        return InstanceFault(kill=False, hang_s=_seconds(value["hang_s"], "fault.instance.hang_s"))
    raise RuleError('fault.instance is "kill" or {"hang_s": 10}.')


def _error(value: Any, match: Match) -> ErrorAnswer:
    if isinstance(value, str):
        value = {"code": value}
    if not isinstance(value, dict) or not isinstance(value.get("code"), str):
        raise RuleError('fault.error is an error code ("ThrottlingException") or '
                        '{"code": ..., "message": ...}.')
    _no_unknown(value, ("code", "message"), "fault.error")
    code: str = value["code"]
    message: str | None = value.get("message")
    if message is not None and not isinstance(message, str):
        raise RuleError("fault.error.message must be a string.")
    if code == "ModelError":
        raise RuleError('A ModelError is what a container answered: use {"model_error": '
                        '{"status": 500, "message": "..."}}.')
    services = [match.service] if match.service else list(SERVICES)
    statuses: dict[str, int] = {}
    for service in services:
        statuses.update(_error_statuses(service, match.operation))
    if code not in statuses:
        raise RuleError(f"{code!r} is not an error {_calls(match)} can answer; use one of "
                        f"{', '.join(sorted(statuses))}.")
    return ErrorAnswer(code, statuses[code], message or DEFAULT_MESSAGES.get(code, code))


def _error_statuses(service: str, operation: str | None) -> dict[str, int]:
    """Error code -> HTTP status: the operation's modeled errors (all of the service's when no
    operation is named) and the service's common ones."""
    model = service_model(service)
    operations = [operation] if operation else model.operation_names
    statuses = dict(COMMON_ERRORS[service])
    for name in operations:
        for shape in model.operation_model(name).error_shapes:
            error = shape.metadata.get("error", {})
            statuses[error.get("code", shape.name)] = error.get("httpStatusCode", 400)
    statuses.pop("ModelError", None)
    return statuses


def _calls(match: Match) -> str:
    if match.operation:
        return f"{match.service} {match.operation}"
    return f"a call of {match.service}" if match.service else "a call"


def _model_error(value: Any) -> ModelErrorAnswer:
    if not isinstance(value, dict):
        raise RuleError('fault.model_error is {"status": 500, "message": "..."}.')
    _no_unknown(value, ("status", "message"), "fault.model_error")
    status, message = value.get("status", 500), value.get("message", "")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise RuleError(f"fault.model_error.status is the container's HTTP status, 100 to 599 "
                        f"(got {status!r}).")
    if not isinstance(message, str):
        raise RuleError("fault.model_error.message must be a string (the container's answer).")
    return ModelErrorAnswer(status, message)


def _latency(value: Any, kind: str) -> Latency:
    if isinstance(value, dict):
        _no_unknown(value, ("p50", "p99"), f"fault.{kind}")
        p50 = _number(value.get("p50"), f"fault.{kind}.p50")
        p99 = _number(value.get("p99", p50), f"fault.{kind}.p99")
    else:
        p50 = p99 = _number(value, f"fault.{kind}")
    if p50 < 0 or p99 < p50:
        raise RuleError(f"fault.{kind}: milliseconds, at least 0, with p99 at least p50 "
                        f"(got p50 {p50}, p99 {p99}).")
    return Latency(p50 / 1e3, p99 / 1e3, on_model=kind == "model_latency_ms")
