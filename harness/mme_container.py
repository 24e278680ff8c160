"""The emulator as a Testcontainers module: ``SageMakerMmeContainer`` starts the emulator's image
(``mme serve`` with the embedded Triton on CPU), waits until it answers, and hands out what a
test needs to call it. Requires the optional extra ``testcontainers``
(``pip install 'sagemaker-mme-emulator[testcontainers]'``)::

    with SageMakerMmeContainer(model_data="models/") as mme:
        runtime = mme.boto3_client("sagemaker-runtime")
        runtime.invoke_endpoint(EndpointName="local", TargetModel="add.tar.gz", ...)

The module's contract, for a module in another language (docs/testing.md, "Testcontainers"):
the image (``sagemaker-mme-emulator:local``, built by ``docker/build-emulator-image.sh``)
listens on 8080 and answers ``GET /ping`` with 200 once it serves; a local model store is
mounted read-only at ``/models`` (``MME_MODEL_DATA=/models``), or ``MME_MODEL_DATA`` names an S3
URL; every ``mme serve`` flag is an environment variable ``MME_<FLAG>`` or an argument after
``serve``; the image's labels say the port, the health path and the store's mount.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testcontainers.core.container import DockerContainer

IMAGE = "sagemaker-mme-emulator:local"
PORT = 8080
STORE_MOUNT = "/models"
REGION = "us-east-1"
# What clients sign with: the emulator checks no credentials unless it runs --auth sigv4.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class EmulatorDidNotStart(RuntimeError):
    """The container exited, or did not answer ``/ping`` in time; the message quotes its log."""


class SageMakerMmeContainer(DockerContainer):
    def __init__(self, image: str = IMAGE, model_data: str | Path | None = None,
                 endpoint_name: str = "local", region: str = REGION,
                 serve_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 startup_timeout_s: float = 180.0, **kwargs: Any) -> None:
        """``model_data``: a local folder (mounted read-only) or an ``s3://`` URL (then give
        ``MME_S3_ENDPOINT_URL`` in ``env`` for an S3-compatible server); ``serve_args``: more
        ``mme serve`` flags (``["--instances", "2"]``)."""
        super().__init__(image, **kwargs)
        self.endpoint_name = endpoint_name
        self.region = region
        self.startup_timeout_s = startup_timeout_s
        self.with_exposed_ports(PORT)
        self.with_env("MME_ENDPOINT_NAME", endpoint_name)
        self.with_env("MME_REGION", region)
        if model_data is not None:
            text = str(model_data)
            if text.startswith("s3://"):
                self.with_env("MME_MODEL_DATA", text)
            else:
                self.with_volume_mapping(str(Path(text).resolve()), STORE_MOUNT, "ro")
                self.with_env("MME_MODEL_DATA", STORE_MOUNT)
        for name, value in (env or {}).items():
            self.with_env(name, value)
        self.with_command(["serve", *serve_args])

    def start(self) -> SageMakerMmeContainer:
        super().start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._answers():
            self.get_wrapped_container().reload()
            status = self.get_wrapped_container().status
            if status in ("exited", "dead") or time.monotonic() > deadline:
                logs = b"".join(part for part in self.get_logs() if part)
                tail = logs.decode(errors="replace").splitlines()[-30:]
                self.stop()
                raise EmulatorDidNotStart(
                    f"the emulator's container ({status}) did not answer /ping within "
                    f"{self.startup_timeout_s:g} s; its last lines:\n" + "\n".join(tail))
            time.sleep(0.2)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/ping", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.get_container_host_ip()}:{self.get_exposed_port(PORT)}"

    def client_env(self) -> dict[str, str]:
        """The variables that point unmodified AWS SDKs (boto3, the SageMaker SDK, the AWS CLI)
        at the emulator: ``AWS_ENDPOINT_URL_*`` per service, the region, dummy credentials.
        (Not ``env``: that is the container's own environment in Testcontainers.)"""
        url = self.endpoint_url
        return {"AWS_ENDPOINT_URL_SAGEMAKER": url, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url,
                "AWS_ENDPOINT_URL_CLOUDWATCH": url,
                "AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING": url,
                "AWS_DEFAULT_REGION": self.region, "AWS_REGION": self.region, **CREDENTIALS}

    def boto3_client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client of ``service`` (``sagemaker-runtime``, ``sagemaker``, ``cloudwatch``,
        ``application-autoscaling``) bound to the emulator."""
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint_url, region_name=self.region,
                            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                            **kwargs)
