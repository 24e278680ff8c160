"""The emulator's own S3 writes and reads (asynchronous inference's inputs and outputs, data
capture's files), through one boto3 client on ``--s3-endpoint-url`` in ``--region``: blocking
calls made in threads, the client made once, by the first thread that needs it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from emulator.contract.async_inference import split_s3_url

S3_POOL = 32  # connections the client keeps: the calls run in threads, side by side


class S3Objects:
    def __init__(self, endpoint_url: str | None, region: str) -> None:
        self._endpoint_url = endpoint_url
        self._region = region
        self._client: Any = None
        self._lock = threading.Lock()

    def _s3(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                self._client = boto3.client(
                    "s3", endpoint_url=self._endpoint_url, region_name=self._region,
                    config=Config(retries={"max_attempts": 3, "mode": "standard"},
                                  max_pool_connections=S3_POOL))
            return self._client

    async def get(self, url: str) -> bytes:
        bucket, key = split_s3_url(url)

        def read() -> bytes:
            body: bytes = self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()
            return body
        return await asyncio.to_thread(read)

    async def put(self, url: str, body: bytes, content_type: str | None,
                  kms_key_id: str | None = None) -> None:
        """Write ``body`` at ``url``; ``kms_key_id``: encrypted at rest with that KMS key
        (SSE-KMS), as SageMaker writes what a config's KmsKeyId names."""
        bucket, key = split_s3_url(url)
        extra = {"ContentType": content_type} if content_type else {}
        if kms_key_id:
            extra |= {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key_id}
        await asyncio.to_thread(
            lambda: self._s3().put_object(Bucket=bucket, Key=key, Body=body, **extra))
