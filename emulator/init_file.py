"""``mme serve --init FILE``: models, endpoint configs, endpoints, inference components, scaling
and alarms declared in one YAML or JSON file, applied at start before the server listens.

Each entry is the parameters of the boto3 call that creates it, and goes through that call's own
path: the request's checks (botocore's model and SageMaker's rules) and the service's handler,
so a mistake is the error boto3 would get, said with the entry that caused it::

    models: [CreateModel params]
    endpoint_configs: [CreateEndpointConfig params]
    endpoints: [CreateEndpoint params]                  # waited for until InService
    inference_components: [CreateInferenceComponent params]   # likewise
    scaling: [{register: RegisterScalableTarget params, policies: [PutScalingPolicy params]}]
    alarms: [PutMetricAlarm params]

Applied again (a restart on the same ``--cache-dir``) it changes nothing: every entry applied is
recorded (``init-applied.json`` in the cache folder), and one that exists as recorded is left
alone. A changed entry is applied where the API allows (UpdateEndpoint, UpdateInferenceComponent,
the put calls of scaling and alarms); a changed model or endpoint config is refused, as
SageMaker cannot update them. Any failure is a ``StartRefused``: one line, exit status 2.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.autoscaling import wire as scaling_wire
from emulator.autoscaling.service import AutoScalingService
from emulator.cloudwatch import wire as cloudwatch_wire
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.service import CloudWatchService
from emulator.contract import control_plane as control_wire
from emulator.contract import inference_components as component_rules
from emulator.contract.json_errors import JsonProtocolError
from emulator.control.service import ControlPlaneService
from emulator.settings import StartRefused

log = logging.getLogger(__name__)

# The file's sections in the order they are applied (each may refer to the ones before it).
SECTIONS = ("models", "endpoint_configs", "endpoints", "inference_components", "scaling",
            "alarms")
RECORD_FILE = "init-applied.json"
POLL_S = 0.1  # how often an endpoint or component being created is asked for its status

Entry = dict[str, Any]


@dataclass
class InitFile:
    """The file as read: its sections' entries, each a mapping."""

    path: Path
    sections: dict[str, list[Entry]] = field(default_factory=dict)

    def entries(self, section: str) -> list[Entry]:
        return self.sections.get(section, [])


def read_init_file(path: Path) -> InitFile:
    """The file read and its shape checked (the entries' contents are the APIs' to check)."""
    where = f"--init {path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise StartRefused(f"{where}: cannot read it ({exc.strerror or exc})") from None
    try:
        if path.suffix.lower() == ".json":
            document = json.loads(text)
        else:
            import yaml  # type: ignore[import-untyped]  # PyYAML: uvicorn[standard] brings it

            document = yaml.safe_load(text)
    except ImportError:
        raise StartRefused(f"{where}: reading YAML needs PyYAML (pip install pyyaml); or write "
                           "the file as JSON (FILE.json)") from None
    except ValueError as exc:
        raise StartRefused(f"{where}: not valid JSON ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - yaml.YAMLError, imported only to read YAML
        detail = " ".join(str(exc).split())
        raise StartRefused(f"{where}: not valid YAML ({detail})") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise StartRefused(f"{where}: expected a mapping of sections ({', '.join(SECTIONS)}), "
                           f"found a {_kind(document)}")
    unknown = sorted(str(k) for k in document if k not in SECTIONS)
    if unknown:
        raise StartRefused(f"{where}: unknown section {', '.join(unknown)}; the sections are "
                           f"{', '.join(SECTIONS)}")
    sections: dict[str, list[Entry]] = {}
    for section in SECTIONS:
        entries = document.get(section) or []
        if not isinstance(entries, list):
            raise StartRefused(f"{where}: {section} must be a list of entries, not a "
                               f"{_kind(entries)}")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise StartRefused(f"{where}: {section}[{index}] must be a mapping of the call's "
                                   f"parameters, not a {_kind(entry)}")
            if section == "scaling":
                _check_scaling(where, index, entry)
        sections[section] = entries
    return InitFile(path, sections)


def _check_scaling(where: str, index: int, entry: Entry) -> None:
    unknown = sorted(str(k) for k in entry if k not in ("register", "policies"))
    if unknown or not isinstance(entry.get("register"), dict):
        raise StartRefused(f"{where}: scaling[{index}] takes `register:` (RegisterScalableTarget's "
                           "parameters) and `policies:` (a list of PutScalingPolicy's)"
                           + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    policies = entry.get("policies") or []
    if not isinstance(policies, list) or not all(isinstance(p, dict) for p in policies):
        raise StartRefused(f"{where}: scaling[{index}].policies must be a list of "
                           "PutScalingPolicy parameters")


def _kind(value: object) -> str:
    """How a YAML or JSON reader names what it found."""
    kinds = {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "number",
             float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _canonical(entry: Entry) -> str:
    return json.dumps(entry, sort_keys=True, default=str)


class _Refused(Exception):
    """An API's error for an entry: ``code`` and ``message`` as boto3 would show them."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")


async def _through(target: str, params: Entry,
                   parse: Callable[[str, bytes], tuple[str, dict[str, Any]]],
                   handle: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]],
                   refusal: type[JsonProtocolError] | type[CloudWatchError]) -> dict[str, Any]:
    """One entry's call as its API's route makes it: ``parse`` checks the request as the wire
    would carry it, ``handle`` answers; the API's ``refusal`` becomes the entry's error."""
    try:
        name, checked = parse(target, _canonical(params).encode())
        return await handle(name, checked)
    except refusal as exc:
        raise _Refused(exc.code, exc.message) from None


class InitApplier:
    """Applies an ``InitFile`` through the services' own request paths."""

    def __init__(self, control: ControlPlaneService, scaling: AutoScalingService,
                 cloudwatch: CloudWatchService, state_dir: Path | None) -> None:
        self.control = control
        self.scaling = scaling
        self.cloudwatch = cloudwatch
        # What was applied, beside the state it made (None, --ephemeral: no state kept, so
        # every start applies the file afresh).
        self.record_path = state_dir / RECORD_FILE if state_dir is not None else None
        self.applied: dict[str, str] = {}
        self.changes: list[str] = []  # what this start did, one phrase per entry changed

    # --- the three APIs, as their routes call them ------------------------------------------

    async def _sagemaker(self, operation: str, params: Entry) -> dict[str, Any]:
        def parse(target: str, raw: bytes) -> tuple[str, dict[str, Any]]:
            return (component_rules.parse_request(target, raw)
                    or control_wire.parse_request(target, raw))

        return await _through(f"{control_wire.TARGET_PREFIX}{operation}", params, parse,
                              self.control.handle, JsonProtocolError)

    async def _autoscaling(self, operation: str, params: Entry) -> dict[str, Any]:
        return await _through(f"{scaling_wire.TARGET_PREFIX}{operation}", params,
                              scaling_wire.parse_request, self.scaling.handle, JsonProtocolError)

    async def _cloudwatch(self, operation: str, params: Entry) -> dict[str, Any]:
        return await _through(f"{cloudwatch_wire.TARGET_PREFIX}{operation}", params,
                              cloudwatch_wire.parse_json, self.cloudwatch.handle, CloudWatchError)

    async def _exists(self, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        try:
            return await call()
        except _Refused:
            return None

    # --- applying ---------------------------------------------------------------------------

    async def apply(self, init: InitFile) -> list[str]:
        """Apply every entry in order; what changed (empty: nothing). Raises StartRefused."""
        self.applied = self._read_record()
        self.changes = []
        for section in SECTIONS:
            for index, entry in enumerate(init.entries(section)):
                where = f"--init {init.path}: {section}[{index}]"
                try:
                    await getattr(self, f"_apply_{section}")(entry, where)
                except _Refused as exc:
                    named = _named(entry["register"] if section == "scaling" else entry)
                    raise StartRefused(f"{where}{named}: {exc}") from None
                finally:
                    self._write_record()
        return self.changes

    def _read_record(self) -> dict[str, str]:
        if self.record_path is None:
            return {}
        try:
            record = json.loads(self.record_path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}

    def _write_record(self) -> None:
        if self.record_path is None:
            return
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.applied, indent=1, sort_keys=True))
        tmp.replace(self.record_path)

    def _state(self, key: str, entry: Entry, exists: bool) -> str:
        """``new`` (to create), ``same`` (nothing to do) or ``changed``."""
        if not exists:
            return "new"
        return "same" if self.applied.get(key) == _canonical(entry) else "changed"

    def _done(self, key: str, entry: Entry, what: str) -> None:
        self.applied[key] = _canonical(entry)
        self.changes.append(what)
        log.info("init: %s", what)

    async def _immutable(self, kind: str, name_key: str, entry: Entry, describe: str,
                         create: str) -> None:
        """A model or endpoint config: created once; a change is refused."""
        name = entry.get(name_key)
        key = f"{kind}:{name}"
        exists = isinstance(name, str) and await self._exists(
            lambda: self._sagemaker(describe, {name_key: name})) is not None
        state = self._state(key, entry, exists)
        if state == "same":
            return
        if state == "changed":
            how = ("was not created by this file" if key not in self.applied
                   else "exists with other settings")
            raise _Refused("ValidationException",
                           f"{kind} {name} {how}, and SageMaker cannot update a {kind}: give "
                           f"the entry a new {name_key} (and refer to that), or delete the "
                           f"{kind} first ({'Delete' + create.removeprefix('Create')})")
        await self._sagemaker(create, entry)
        self._done(key, entry, f"{kind} {name} created")

    async def _apply_models(self, entry: Entry, _where: str) -> None:
        await self._immutable("Model", "ModelName", entry, "DescribeModel", "CreateModel")

    async def _apply_endpoint_configs(self, entry: Entry, _where: str) -> None:
        await self._immutable("EndpointConfig", "EndpointConfigName", entry,
                              "DescribeEndpointConfig", "CreateEndpointConfig")

    async def _apply_endpoints(self, entry: Entry, _where: str) -> None:
        name = entry.get("EndpointName")
        key = f"Endpoint:{name}"
        found = (await self._exists(lambda: self._sagemaker("DescribeEndpoint",
                                                            {"EndpointName": name}))
                 if isinstance(name, str) else None)
        state = self._state(key, entry, found is not None)
        if state == "same":
            await self._until_in_service("Endpoint", name, "DescribeEndpoint",
                                         {"EndpointName": name}, "EndpointStatus")
            return
        if state == "new":
            await self._sagemaker("CreateEndpoint", entry)
            what = f"Endpoint {name} created"
        else:
            await self._until_in_service("Endpoint", name, "DescribeEndpoint",
                                         {"EndpointName": name}, "EndpointStatus")
            update = {k: v for k, v in entry.items()
                      if k in ("EndpointName", "EndpointConfigName", "DeploymentConfig")}
            await self._sagemaker("UpdateEndpoint", update)
            what = f"Endpoint {name} updated to {entry.get('EndpointConfigName')}"
        await self._until_in_service("Endpoint", name, "DescribeEndpoint",
                                     {"EndpointName": name}, "EndpointStatus")
        self._done(key, entry, what)

    async def _apply_inference_components(self, entry: Entry, _where: str) -> None:
        name = entry.get("InferenceComponentName")
        key = f"InferenceComponent:{name}"
        ask = {"InferenceComponentName": name}
        found = (await self._exists(lambda: self._sagemaker("DescribeInferenceComponent", ask))
                 if isinstance(name, str) else None)
        state = self._state(key, entry, found is not None)
        if state == "same":
            return
        if state == "new":
            await self._sagemaker("CreateInferenceComponent", entry)
            what = f"InferenceComponent {name} created"
        else:
            assert found is not None
            moved = [k for k in ("EndpointName", "VariantName")
                     if k in entry and entry[k] != found.get(k)]
            if moved:
                raise _Refused("ValidationException",
                               f"InferenceComponent {name} is on {found.get('EndpointName')} "
                               f"{found.get('VariantName')}; its {' and '.join(moved)} cannot "
                               "be updated: give the entry a new InferenceComponentName")
            await self._until_in_service("InferenceComponent", name,
                                         "DescribeInferenceComponent", ask,
                                         "InferenceComponentStatus")
            update = {k: v for k, v in entry.items()
                      if k in ("InferenceComponentName", "Specification", "RuntimeConfig")}
            await self._sagemaker("UpdateInferenceComponent", update)
            what = f"InferenceComponent {name} updated"
        await self._until_in_service("InferenceComponent", name, "DescribeInferenceComponent",
                                     ask, "InferenceComponentStatus")
        self._done(key, entry, what)

    async def _until_in_service(self, kind: str, name: object, describe: str, params: Entry,
                                status_key: str) -> None:
        """Wait while it is being created or updated; its failure is the entry's."""
        while True:
            found = await self._sagemaker(describe, params)
            status = found.get(status_key)
            if status == "InService":
                return
            if status == "Failed":
                raise _Refused("Failed", f"{kind} {name} failed: "
                               f"{found.get('FailureReason', 'no reason given')}")
            await asyncio.sleep(POLL_S)

    async def _apply_scaling(self, entry: Entry, where: str) -> None:
        register: Entry = entry["register"]
        ids = {k: register.get(k) for k in ("ServiceNamespace", "ResourceId",
                                              "ScalableDimension")}
        key = "ScalableTarget:" + "/".join(str(v) for v in ids.values())
        found = await self._exists(lambda: self._autoscaling("DescribeScalableTargets", {
            "ServiceNamespace": ids["ServiceNamespace"], "ResourceIds": [ids["ResourceId"]],
            "ScalableDimension": ids["ScalableDimension"]}))
        exists = bool(found and found.get("ScalableTargets"))
        if self._state(key, register, exists) != "same":
            await self._autoscaling("RegisterScalableTarget", register)
            self._done(key, register, f"scalable target {ids['ResourceId']} registered")
        for index, policy in enumerate(entry.get("policies") or []):
            try:
                await self._put_policy(policy)
            except _Refused as exc:
                raise StartRefused(f"{where}.policies[{index}]{_named(policy)}: {exc}") from None

    async def _put_policy(self, policy: Entry) -> None:
        name, resource = policy.get("PolicyName"), policy.get("ResourceId")
        key = f"ScalingPolicy:{resource}/{name}"
        found = await self._exists(lambda: self._autoscaling("DescribeScalingPolicies", {
            "ServiceNamespace": policy.get("ServiceNamespace"), "PolicyNames": [name],
            "ResourceId": resource}))
        if self._state(key, policy, bool(found and found.get("ScalingPolicies"))) != "same":
            await self._autoscaling("PutScalingPolicy", policy)
            self._done(key, policy, f"scaling policy {name} put")

    async def _apply_alarms(self, entry: Entry, _where: str) -> None:
        name = entry.get("AlarmName")
        key = f"Alarm:{name}"
        found = await self._exists(lambda: self._cloudwatch("DescribeAlarms",
                                                            {"AlarmNames": [name]}))
        if self._state(key, entry, bool(found and found.get("MetricAlarms"))) != "same":
            await self._cloudwatch("PutMetricAlarm", entry)
            self._done(key, entry, f"alarm {name} put")


_NAME_KEYS = ("ModelName", "EndpointConfigName", "EndpointName", "InferenceComponentName",
              "AlarmName", "PolicyName", "ResourceId")


def _named(entry: Mapping[str, Any]) -> str:
    """`` (EndpointName demo)``: the entry's name, when it has one, to find it in the file."""
    for key in _NAME_KEYS:
        if isinstance(entry.get(key), str):
            return f" ({key} {entry[key]})"
    return ""
