"""CloudWatch's three wire protocols, as botocore's service model defines them.

- ``smithy-rpc-v2-cbor`` (what boto3 sends today): ``POST /service/GraniteServiceVersion20100801/
  operation/<Op>``, ``smithy-protocol: rpc-v2-cbor``, CBOR bodies, timestamps as CBOR tag 1.
- ``json`` (JSON 1.0): ``POST /`` with ``X-Amz-Target: GraniteServiceVersion20100801.<Op>``,
  timestamps as epoch seconds.
- ``query``: ``POST /`` with a form body ``Action=<Op>&Version=2010-08-01&...``, XML answers.

Requests are decoded into plain dicts (timestamps as epoch seconds), validated against the
operation's input shape (the validator every AWS API here shares, ``contract/botocore_validation``;
CloudWatch's own rule first: a missing required member is ``MissingParameter``), and answered from
the operation's output shape; nothing here knows what the operations do
(``emulator/cloudwatch/service.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any
from xml.etree import ElementTree

import cbor2
from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape

from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.contract.apis import (
    CBOR_PREFIX,
    TARGET_PREFIX_OF,
    RepeatedParameter,
    Service,
    parse_form,
)
from emulator.contract.botocore_output import project
from emulator.contract.botocore_validation import (
    format_errors,
    service_model,
    to_epoch,
    validate_request,
)
from emulator.contract.json_errors import SERIALIZATION, UnreadableBody, read_body

TARGET_PREFIX = TARGET_PREFIX_OF[Service.CLOUDWATCH]
CBOR_PATH = CBOR_PREFIX + "{operation}"
CBOR_CONTENT_TYPE = "application/cbor"
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
XML_CONTENT_TYPE = "text/xml"
API_VERSION = "2010-08-01"

OPERATIONS = frozenset({
    "GetMetricStatistics", "GetMetricData", "ListMetrics", "PutMetricData",
    "PutMetricAlarm", "PutCompositeAlarm", "DescribeAlarms", "DescribeAlarmsForMetric",
    "DescribeAlarmHistory", "SetAlarmState", "DeleteAlarms", "EnableAlarmActions",
    "DisableAlarmActions", "TagResource", "UntagResource", "ListTagsForResource",
})


def _operation_model(operation: str) -> OperationModel:
    return service_model("cloudwatch").operation_model(operation)


def _input_shape(operation: str) -> StructureShape:
    if operation not in OPERATIONS:
        raise CloudWatchError("InvalidAction", f"Operation {operation} is not supported by the "
                              f"emulator (supported: {', '.join(sorted(OPERATIONS))})")
    shape = _operation_model(operation).input_shape
    assert isinstance(shape, StructureShape)
    return shape


# ---------------------------------------------------------------------------------------------
# Requests


def _normalize(shape: Shape, value: Any) -> Any:
    """Timestamps to epoch seconds whatever the protocol sent (CBOR datetime, ISO string)."""
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        return {k: _normalize(shape.members[k], v) if k in shape.members else v
                for k, v in value.items()}
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [_normalize(shape.member, v) for v in value]
    if shape.type_name == "timestamp":
        if isinstance(value, datetime):
            return value.timestamp()
        epoch = to_epoch(value)
        return value if epoch is None else epoch
    return value


def _checked(operation: str, params: Any) -> dict[str, Any]:
    shape = _input_shape(operation)
    if not isinstance(params, dict):
        raise CloudWatchError("InvalidParameterValue", "The request body must be a structure.")
    normalized: dict[str, Any] = _normalize(shape, params)
    # CloudWatch's own rule, before the model's: a missing required member is MissingParameter.
    for name in shape.required_members:
        if normalized.get(name) is None:
            raise CloudWatchError("MissingParameter", f"The parameter {name} is required.")
    try:
        errors = validate_request(_operation_model(operation), normalized)
    except UnreadableBody as exc:  # a value nested deep where a scalar belongs
        raise CloudWatchError(SERIALIZATION, str(exc)) from exc
    if errors:
        raise CloudWatchError("InvalidParameterValue", format_errors(errors))
    return normalized


def parse_cbor(operation: str, body: bytes) -> dict[str, Any]:
    try:
        params = cbor2.loads(body) if body else {}
    except (cbor2.CBORDecodeError, ValueError) as exc:
        raise CloudWatchError("SerializationException", f"Malformed CBOR body: {exc}") from exc
    return _checked(operation, params)


def parse_json(target: str, body: bytes) -> tuple[str, dict[str, Any]]:
    operation = target[len(TARGET_PREFIX):]
    try:
        params = read_body(body)
    except UnreadableBody as exc:
        raise CloudWatchError(SERIALIZATION, str(exc)) from exc
    return operation, _checked(operation, params)


def parse_query(body: bytes) -> tuple[str, dict[str, Any]]:
    try:  # the same parse IAM decided on (contract/apis.py): a repeated parameter is refused
        form = parse_form(body)
    except RepeatedParameter as exc:
        raise CloudWatchError("InvalidParameterCombination", str(exc)) from exc
    operation = form.pop("Action", "")
    if form.pop("Version", API_VERSION) != API_VERSION:
        raise CloudWatchError("InvalidParameterValue", f"The API version must be {API_VERSION}.")
    return operation, _checked(operation, _from_form(_input_shape(operation), _form_tree(form)))


class _FormNode:
    """One step of the query protocol's dotted keys: ``Dimensions.member.1.Name`` is the path
    Dimensions -> member -> 1 -> Name, holding the value at its end."""

    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[str, _FormNode] = {}
        self.value = ""


def _form_tree(form: Mapping[str, str]) -> _FormNode:
    """Every key split once: the walk below then costs what the form holds, not its square
    (1,500 queries took 18 s of the event loop when each lookup scanned every key)."""
    root = _FormNode()
    for key, value in form.items():
        node = root
        for part in key.split("."):
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _FormNode()
            node = child
        node.value = value
    return root


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "integer": int, "long": int, "double": float, "float": float,
    "boolean": lambda s: s.lower() == "true",
}


def _from_form(shape: Shape, node: _FormNode) -> Any:
    """The query protocol's flattened keys (``Dimensions.member.1.Name``) back into a dict;
    what the input shape does not name is ignored."""
    if isinstance(shape, StructureShape):
        out = {}
        for name, member in shape.members.items():
            child = node.children.get(member.serialization.get("name", name))
            if child is not None:
                out[name] = _from_form(member, child)
        return out
    if isinstance(shape, ListShape):
        members = node.children.get("member")
        items: list[Any] = []
        while members is not None and str(len(items) + 1) in members.children:
            items.append(_from_form(shape.member, members.children[str(len(items) + 1)]))
        return items
    if isinstance(shape, MapShape):
        entries_node = node.children.get("entry")
        entries: dict[str, Any] = {}
        index = 1
        while entries_node is not None and str(index) in entries_node.children:
            entry = entries_node.children[str(index)]
            key = entry.children.get("key")
            value = entry.children.get("value")
            entries[key.value if key else ""] = _from_form(shape.value, value or _FormNode())
            index += 1
        return entries
    try:
        return _CONVERTERS.get(shape.type_name, str)(node.value)
    except ValueError:
        return node.value  # validation reports it with the member's path


# ---------------------------------------------------------------------------------------------
# Responses


def _with_times(shape: Shape, value: Any, convert: Callable[[float], Any]) -> Any:
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        return {k: _with_times(shape.members[k], v, convert) for k, v in value.items()}
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [_with_times(shape.member, v, convert) for v in value]
    if isinstance(shape, MapShape) and isinstance(value, dict):
        return {k: _with_times(shape.value, v, convert) for k, v in value.items()}
    if shape.type_name == "timestamp":
        return convert(value)
    return value


_NO_OUTPUT = StructureShape("NoOutput", {"type": "structure", "members": {}})


def _output(operation: str, value: dict[str, Any]) -> tuple[StructureShape, dict[str, Any]]:
    shape = _operation_model(operation).output_shape
    if shape is None:  # PutMetricAlarm, DeleteAlarms, ...: an empty answer
        return _NO_OUTPUT, {}
    assert isinstance(shape, StructureShape)
    return shape, project(shape, value)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def cbor_body(operation: str, value: dict[str, Any]) -> bytes:
    shape, value = _output(operation, value)
    # cbor2 writes an aware datetime as tag 1 (epoch seconds), as the protocol wants.
    return cbor2.dumps(_with_times(shape, value, _utc), datetime_as_timestamp=True)


def json_body(operation: str, value: dict[str, Any]) -> bytes:
    _, value = _output(operation, value)
    return json.dumps(value, separators=(",", ":")).encode()


def error_headers(error: CloudWatchError) -> dict[str, str]:
    return {"x-amzn-query-error": f"{error.code};{error.fault}"}


def cbor_error(error: CloudWatchError) -> bytes:
    return cbor2.dumps({"__type": error.shape, "message": error.message})


def json_error(error: CloudWatchError) -> bytes:
    return json.dumps({"__type": error.shape, "message": error.message}).encode()


def _iso(epoch: float) -> str:
    return _utc(epoch).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# What XML 1.0 cannot carry, even escaped: a string stored through JSON or CBOR (a StateReason,
# an AlarmDescription) is shown with U+FFFD there instead, so the answer still parses.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def _xml(parent: ElementTree.Element, shape: Shape, value: Any) -> None:
    if isinstance(shape, StructureShape):
        for name, item in value.items():
            member = shape.members[name]
            _xml(ElementTree.SubElement(parent, member.serialization.get("name", name)),
                 member, item)
    elif isinstance(shape, ListShape):
        for item in value:
            _xml(ElementTree.SubElement(parent, "member"), shape.member, item)
    elif isinstance(shape, MapShape):
        for key, item in value.items():
            entry = ElementTree.SubElement(parent, "entry")
            ElementTree.SubElement(entry, "key").text = _text(key)
            _xml(ElementTree.SubElement(entry, "value"), shape.value, item)
    elif shape.type_name == "timestamp":
        parent.text = _iso(value)
    elif shape.type_name == "boolean":
        parent.text = "true" if value else "false"
    else:
        parent.text = _text(value)


def xml_body(operation: str, value: dict[str, Any], request_id: str) -> bytes:
    shape, value = _output(operation, value)
    root = ElementTree.Element(f"{operation}Response",
                               xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/")
    _xml(ElementTree.SubElement(root, f"{operation}Result"), shape, value)
    metadata = ElementTree.SubElement(root, "ResponseMetadata")
    ElementTree.SubElement(metadata, "RequestId").text = request_id
    return _serialize(root)


def xml_error(error: CloudWatchError, request_id: str) -> bytes:
    root = ElementTree.Element("ErrorResponse",
                               xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/")
    node = ElementTree.SubElement(root, "Error")
    ElementTree.SubElement(node, "Type").text = error.fault
    ElementTree.SubElement(node, "Code").text = error.code
    ElementTree.SubElement(node, "Message").text = _text(error.message)
    ElementTree.SubElement(root, "RequestId").text = request_id
    return _serialize(root)


def _serialize(root: ElementTree.Element) -> bytes:
    xml: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml
