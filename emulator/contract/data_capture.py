"""Data capture: an endpoint config's ``DataCaptureConfig`` as the endpoint honours it,
DescribeEndpoint's summary of it, and the files SageMaker writes to S3, as Model Monitor's
"captured data" pages document them.

A file holds one JSON record per line, at
``<DestinationS3Uri>/<EndpointName>/<VariantName>/<yyyy>/<mm>/<dd>/<hh>/<name>.jsonl`` (the UTC
hour of its calls)::

    {"captureData": {
        "endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                          "data": "1.0,2.0", "encoding": "CSV"},
        "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT",
                           "data": "{\\"outputs\\": ...}", "encoding": "JSON"}},
     "eventMetadata": {"eventId": "<uuid>", "inferenceTime": "2026-11-30T07:40:12Z",
                       "inferenceId": "<InvokeEndpoint's InferenceId, when given>",
                       "targetModel": "<TargetModel, on a multi-model endpoint>"},
     "eventVersion": "0"}

A body is written as text (encoding ``CSV`` or ``JSON``) when its Content-Type's media type is
one of the config's ``CaptureContentTypeHeader`` lists, else base64 (``BASE64``; AWS: "If no
headers are specified SageMaker will by default base64 encode"). [U]: the file's name
(``<mm>-<ss>-<ms>-<uuid>.jsonl``: the minute, second and millisecond of its first call), the
``targetModel`` key (AWS's pages show a single-model endpoint's record only), and that only
answered calls are captured (an error has no output to capture).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

INPUT, OUTPUT, INPUT_AND_OUTPUT = "Input", "Output", "InputAndOutput"
BASE64, CSV, JSON = "BASE64", "CSV", "JSON"


@dataclass(frozen=True)
class CaptureRules:
    """A DataCaptureConfig as sent (botocore's model has checked its members already)."""

    enabled: bool
    sampling_percentage: int
    destination: str  # DestinationS3Uri, without a trailing "/"
    kms_key_id: str | None
    captures_input: bool
    captures_output: bool
    csv_types: frozenset[str]
    json_types: frozenset[str]

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> CaptureRules:
        modes = {o["CaptureMode"] for o in config["CaptureOptions"]}
        headers = config.get("CaptureContentTypeHeader") or {}
        return cls(
            enabled=bool(config.get("EnableCapture", True)),  # AWS: "defaults to enabled"
            sampling_percentage=int(config["InitialSamplingPercentage"]),
            destination=str(config["DestinationS3Uri"]).rstrip("/"),
            kms_key_id=config.get("KmsKeyId") or None,
            captures_input=bool(modes & {INPUT, INPUT_AND_OUTPUT}),
            captures_output=bool(modes & {OUTPUT, INPUT_AND_OUTPUT}),
            csv_types=_media_types(headers.get("CsvContentTypes") or ()),
            json_types=_media_types(headers.get("JsonContentTypes") or ()))

    def summary(self) -> dict[str, Any]:
        """DescribeEndpoint's DataCaptureConfig (a DataCaptureConfigSummary)."""
        return {"EnableCapture": self.enabled,
                "CaptureStatus": "Started" if self.enabled else "Stopped",
                "CurrentSamplingPercentage": self.sampling_percentage,
                "DestinationS3Uri": self.destination,
                "KmsKeyId": self.kms_key_id or ""}

    def encoding(self, content_type: str) -> str:
        media_type = _media_type(content_type)
        if media_type in self.csv_types:
            return CSV
        if media_type in self.json_types:
            return JSON
        return BASE64

    def folder(self, endpoint: str, variant: str, epoch_s: float) -> str:
        """Where the files of the calls of the UTC hour of ``epoch_s`` go (an S3 URL)."""
        hour = time.strftime("%Y/%m/%d/%H", time.gmtime(epoch_s))
        return f"{self.destination}/{endpoint}/{variant}/{hour}"


def _media_type(content_type: str) -> str:
    """``text/csv; charset=utf-8`` -> ``text/csv``: what a Content-Type list entry names."""
    return content_type.split(";", 1)[0].strip().lower()


def _media_types(content_types: Sequence[str]) -> frozenset[str]:
    return frozenset(_media_type(t) for t in content_types)


def file_name(epoch_s: float, unique: str) -> str:
    minute_second = time.strftime("%M-%S", time.gmtime(epoch_s))
    return f"{minute_second}-{int(epoch_s * 1000) % 1000:03d}-{unique}.jsonl"


def _body(rules: CaptureRules, mode: str, content_type: str, body: bytes) -> dict[str, str]:
    encoding = rules.encoding(content_type)
    if encoding != BASE64:
        try:
            data = body.decode("utf-8")
        except UnicodeDecodeError:  # [U] not text after all: kept whole, as base64
            encoding = BASE64
    if encoding == BASE64:
        data = base64.b64encode(body).decode("ascii")
    return {"observedContentType": content_type, "mode": mode, "data": data,
            "encoding": encoding}


def record(rules: CaptureRules, *, event_id: str, epoch_s: float, input_type: str,
           input_body: bytes, output_type: str, output_body: bytes,
           inference_id: str | None, target_model: str | None) -> str:
    """One captured call as its line (no newline)."""
    capture: dict[str, Any] = {}
    if rules.captures_input:
        capture["endpointInput"] = _body(rules, "INPUT", input_type, input_body)
    if rules.captures_output:
        capture["endpointOutput"] = _body(rules, "OUTPUT", output_type, output_body)
    metadata = {"eventId": event_id,
                "inferenceTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))}
    if inference_id is not None:
        metadata["inferenceId"] = inference_id
    if target_model is not None:
        metadata["targetModel"] = target_model
    return json.dumps({"captureData": capture, "eventMetadata": metadata, "eventVersion": "0"},
                      separators=(",", ":"))
