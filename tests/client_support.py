"""AWS clients for the tests: unmodified boto3 clients with dummy credentials, no retries.

Helpers live here rather than in ``conftest.py``: a conftest is for fixtures and hooks, and
importing from it imports it a second time under another name.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
from botocore.compress import maybe_compress_request
from botocore.config import Config
from botocore.parsers import create_parser
from botocore.serialize import create_serializer

DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
                     "region_name": "us-east-1"}


def runtime_client(url: str, **config: Any) -> Any:
    """An unmodified boto3 sagemaker-runtime client; no retries so errors surface as sent."""
    return boto3.client(
        "sagemaker-runtime", endpoint_url=url, **DUMMY_CREDENTIALS,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=120,
                      **config),
    )


@dataclass
class S3:
    """The moto S3 server the ``s3_server`` fixture runs, and a client bound to it."""

    endpoint_url: str
    client: Any

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name


def cloudwatch_call(url: str, protocol: str, operation: str, params: dict[str, Any],
                    compress: bool = False) -> tuple[int, dict[str, Any]]:
    """One call serialized by botocore's code for ``protocol`` and, with ``compress``,
    compressed by botocore's own request compression; (status, parsed answer)."""
    model = botocore.session.get_session().get_service_model("cloudwatch")
    op = model.operation_model(operation)
    request = create_serializer(protocol).serialize_to_request(params, op)
    if protocol == "query":
        request["headers"]["Content-Type"] = "application/x-www-form-urlencoded"
    if compress:
        maybe_compress_request(Config(request_min_compression_size_bytes=1), request, op)
        assert request["headers"]["Content-Encoding"] == "gzip"
    body = request["body"]
    if isinstance(body, dict):
        body = urllib.parse.urlencode(body).encode()
    http = urllib.request.Request(url + request["url_path"], data=body, method="POST",
                                  headers={k: v.decode() if isinstance(v, bytes) else v
                                           for k, v in request["headers"].items()})
    try:
        with urllib.request.urlopen(http) as response:
            status, headers, content = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, content = error.code, error.headers, error.read()
    return status, create_parser(protocol).parse(
        {"status_code": status, "headers": {k.lower(): v for k, v in headers.items()},
         "body": content}, op.output_shape)
