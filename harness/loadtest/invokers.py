"""How a load test reaches an endpoint, and what it reads from the answers.

``mme loadtest`` calls through ``call_boto3`` inside Locust (``locust_engine``): boto3's
``sagemaker-runtime`` with retries off, so every throttle or error is counted rather than hidden,
signed as any client's calls are. ``HttpInvoker`` (asyncio + aiohttp, no signing) is for one-off
calls against the emulator (a sweep's warm-up) and the benchmark of the loop that came before
Locust (``mme bench loadgen``). The metrics and fleet sources poll the emulator's introspection
while a run goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from harness.loadtest.config import CALL_TIMEOUT_S

# Per-request figures the emulator may add to its responses (not part of SageMaker's contract).
MODEL_LATENCY_HEADER = "X-Mme-Model-Latency-Us"
CACHE_HIT_HEADER = "X-Mme-Model-Cache-Hit"
INSTANCE_HEADER = "X-Mme-Instance"  # "<variant>/<instance-id>"
# SageMaker's own: the production variant that served (boto3: InvokedProductionVariant).
VARIANT_HEADER = "x-Amzn-Invoked-Production-Variant"


@dataclass(frozen=True)
class Outcome:
    status: int  # HTTP status; 0 when no response arrived
    error_code: str | None = None  # SageMaker error shape ("ModelError"...), else None
    model_latency_us: float | None = None
    cache_hit: bool | None = None
    variant: str | None = None  # SageMaker's header: present on AWS too
    instance: str | None = None  # "<variant>/<instance-id>": the emulator only
    error_message: str | None = None  # what the endpoint (or the connection) said, shortened

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def answered(self) -> bool:
        """An HTTP answer arrived (an error one too): 0 is a refused or broken connection."""
        return self.status != 0


class Invoker(Protocol):
    async def invoke(self, target_model: str | None) -> Outcome: ...

    async def close(self) -> None: ...


def _float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _bool(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("1", "true", "yes")


def served_by(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(variant, "variant/instance") from a response's headers; either may be missing."""
    lower = {k.lower(): v for k, v in headers.items()}
    variant = lower.get(VARIANT_HEADER.lower()) or None
    instance = lower.get(INSTANCE_HEADER.lower()) or None
    if instance is not None and variant is None and "/" in instance:
        variant = instance.split("/", 1)[0]
    return variant, instance


MESSAGE_CHARS = 300  # enough to say what went wrong; a report keeps one per error code


def shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def error_message_from(body: bytes) -> str | None:
    """The message of a SageMaker error body (``{"message": ...}`` or ``{"Message": ...}``)."""
    import json

    text = body.decode(errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        return shorten(text) if text.strip() else None
    if isinstance(parsed, dict):
        for key in ("message", "Message", "error"):
            if isinstance(parsed.get(key), str):
                return shorten(parsed[key])
    return shorten(text)


def error_code_from(status: int, headers: Mapping[str, str]) -> str | None:
    if 200 <= status < 300:
        return None
    # botocore's rule: x-amzn-ErrorType wins, cut at the first ':'.
    error_type = headers.get("x-amzn-ErrorType") or headers.get("x-amzn-errortype")
    if error_type:
        return error_type.split(":", 1)[0].rsplit("#", 1)[-1]
    return str(status)


class HttpInvoker:
    """POSTs to ``{url}/endpoints/{name}/invocations`` with one shared keep-alive pool."""

    def __init__(
        self,
        url: str,
        endpoint_name: str,
        body: bytes,
        content_type: str,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        accept: str | None = None,
    ) -> None:
        self._url = f"{url.rstrip('/')}/endpoints/{endpoint_name}/invocations"
        self._body = body
        self._headers = {"Content-Type": content_type}
        if accept:
            self._headers["Accept"] = accept
        self._timeout_s = timeout_s
        self._session: Any = None

    async def _ensure(self) -> Any:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=False),
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
            )
        return self._session

    async def invoke(self, target_model: str | None) -> Outcome:
        import aiohttp

        session = await self._ensure()
        headers = dict(self._headers)
        if target_model is not None:
            headers["X-Amzn-SageMaker-Target-Model"] = target_model
        try:
            async with session.post(self._url, data=self._body, headers=headers) as resp:
                body = await resp.read()
                variant, instance = served_by(resp.headers)
                ok = 200 <= resp.status < 300
                return Outcome(
                    status=resp.status,
                    error_code=error_code_from(resp.status, resp.headers),
                    model_latency_us=_float(resp.headers.get(MODEL_LATENCY_HEADER)),
                    cache_hit=_bool(resp.headers.get(CACHE_HIT_HEADER)),
                    variant=variant,
                    instance=instance,
                    error_message=None if ok else error_message_from(body),
                )
        except asyncio.TimeoutError:
            return Outcome(status=0, error_code="ClientTimeout",
                           error_message=f"no answer within {self._timeout_s:g} s")
        except aiohttp.ClientError as exc:
            return Outcome(status=0, error_code=type(exc).__name__,
                           error_message=shorten(str(exc)) or None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def call_boto3(client: Any, endpoint_name: str, body: bytes, content_type: str,
               target_model: str | None) -> Outcome:
    """One ``invoke_endpoint`` (blocking), its answer or error as an ``Outcome``: what each
    Locust user does per call."""
    from botocore.exceptions import BotoCoreError, ClientError

    kwargs: dict[str, Any] = {
        "EndpointName": endpoint_name,
        "Body": body,
        "ContentType": content_type,
    }
    if target_model is not None:
        kwargs["TargetModel"] = target_model
    try:
        response = client.invoke_endpoint(**kwargs)
        response["Body"].read()
        headers = response["ResponseMetadata"].get("HTTPHeaders", {})
        variant, instance = served_by(headers)
        return Outcome(
            status=response["ResponseMetadata"]["HTTPStatusCode"],
            model_latency_us=_float(headers.get(MODEL_LATENCY_HEADER.lower())),
            cache_hit=_bool(headers.get(CACHE_HIT_HEADER.lower())),
            variant=response.get("InvokedProductionVariant") or variant,
            instance=instance,
        )
    except ClientError as exc:
        meta = exc.response.get("ResponseMetadata", {})
        error = exc.response.get("Error", {})
        return Outcome(
            status=int(meta.get("HTTPStatusCode", 0)),
            error_code=error.get("Code", "ClientError"),
            error_message=shorten(str(error.get("Message", ""))) or None,
        )
    except BotoCoreError as exc:
        return Outcome(status=0, error_code=type(exc).__name__,
                       error_message=shorten(str(exc)) or None)


class MetricsSource(Protocol):
    async def poll(self) -> dict[str, Any] | None: ...

    async def close(self) -> None: ...


def find_endpoint_snapshot(data: Any, endpoint_name: str) -> dict[str, Any] | None:
    """The ``{"Dimensions", "Metrics"}`` snapshot of ``endpoint_name`` anywhere in ``data``."""
    if isinstance(data, dict):
        dims = data.get("Dimensions")
        if isinstance(dims, dict) and "Metrics" in data:
            if dims.get("EndpointName") == endpoint_name:
                return data
            return None
        values: Any = data.values()
    elif isinstance(data, list):
        values = data
    else:
        return None
    for value in values:
        found = find_endpoint_snapshot(value, endpoint_name)
        if found is not None:
            return found
    return None


class _EmulatorJson:
    """Polls one of the emulator's JSON pages; None when it does not answer 200 with JSON."""

    def __init__(self, url: str, path: str) -> None:
        self._url = f"{url.rstrip('/')}{path}"
        self._session: Any = None

    async def _get(self) -> Any:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        try:
            async with self._session.get(self._url) as resp:
                if resp.status != 200:
                    return None
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class EmulatorMetrics(_EmulatorJson):
    """Reads the endpoint's CloudWatch-style counters from ``GET /_emulator/metrics``."""

    def __init__(self, url: str, endpoint_name: str) -> None:
        super().__init__(url, "/_emulator/metrics")
        self._endpoint = endpoint_name

    async def poll(self) -> dict[str, Any] | None:
        snapshot = find_endpoint_snapshot(await self._get(), self._endpoint)
        return snapshot.get("Metrics") if snapshot else None


class FleetSource(Protocol):
    async def poll(self) -> dict[str, dict[str, Any]] | None: ...

    async def close(self) -> None: ...


def fleet_snapshot(data: Any, endpoint_name: str) -> dict[str, dict[str, Any]] | None:
    """Each instance of ``endpoint_name`` in a ``GET /_emulator/models`` answer, keyed
    ``"<variant>/<instance-id>"`` as the ``X-Mme-Instance`` header names it."""
    try:
        endpoint = data["Endpoints"][endpoint_name]
    except (KeyError, TypeError):
        return None
    out: dict[str, dict[str, Any]] = {}
    for variant, described in (endpoint.get("Variants") or {}).items():
        for instance in described.get("Instances") or []:
            key = f"{variant}/{instance.get('InstanceId')}"
            out[key] = {
                "variant": variant,
                "loaded_models": int(instance.get("LoadedModelCount") or 0),
                "in_flight": int(instance.get("InFlight") or 0),
                "loaded_bytes": instance.get("LoadedBytes"),
                "draining": bool(instance.get("Draining", False)),
            }
    return out


class EmulatorFleet(_EmulatorJson):
    """Samples each instance's loaded models from ``GET /_emulator/models`` (emulator only)."""

    def __init__(self, url: str, endpoint_name: str) -> None:
        super().__init__(url, "/_emulator/models")
        self._endpoint = endpoint_name

    async def poll(self) -> dict[str, dict[str, Any]] | None:
        data = await self._get()
        return fleet_snapshot(data, self._endpoint) if data is not None else None
