"""AWS clients for the tests: unmodified boto3 clients with dummy credentials, no retries.

Helpers live here rather than in ``conftest.py``: a conftest is for fixtures and hooks, and
importing from it imports it a second time under another name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

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
