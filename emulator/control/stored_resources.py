"""Models and endpoint configs: stored documents behind the same four operations each.

A model or an endpoint config is the request that created it, kept as sent (``Resource``);
Describe renders it back with its name, ARN and CreationTime. Neither has a lifecycle: it exists
from Create to Delete. An endpoint keeps a snapshot of its config (``state_db.Deployment``), so
deleting a config an endpoint uses is allowed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from emulator.contract import async_inference
from emulator.contract import control_plane as wire
from emulator.contract.control_plane import KIND_CONFIG, KIND_MODEL
from emulator.control.state_db import CONFIGS, MODELS, AlreadyExists, ControlStore, Resource

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How one stored resource kind is named on the wire."""

    table: str
    kind: str  # in ARNs and messages
    name_key: str
    arn_key: str
    list_key: str
    operation_noun: str  # DescribeModel, DescribeEndpointConfig
    defaults: dict[str, Any] = dataclasses.field(default_factory=dict)


_MODEL = _Kind(MODELS, KIND_MODEL, "ModelName", "ModelArn", "Models", "Model",
               {"EnableNetworkIsolation": False})
_CONFIG = _Kind(CONFIGS, KIND_CONFIG, "EndpointConfigName", "EndpointConfigArn",
                "EndpointConfigs", "EndpointConfig")


def _is_multi_model(model: dict[str, Any]) -> bool:
    containers = [model.get("PrimaryContainer") or {}, *(model.get("Containers") or [])]
    return any(c.get("Mode") == "MultiModel" for c in containers)


def with_token(body: dict[str, Any], token: str | None) -> dict[str, Any]:
    """A List answer, with its NextToken when there is a next page."""
    if token:
        body["NextToken"] = token
    return body


class StoredResources:
    """CreateModel ... DeleteEndpointConfig, and the lookups the endpoint operations make."""

    def __init__(self, store: ControlStore, arn: Callable[[str, str], str],
                 clock: Callable[[], float],
                 image_problem: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        self.store = store
        self.arn = arn
        self._clock = clock
        # Why a container's Image cannot run here (the launcher decides), checked at CreateModel.
        self._image_problem = image_problem

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateModel": self.create_model,
            "DescribeModel": lambda p: self._describe(_MODEL, p),
            "ListModels": lambda p: self._list(_MODEL, p),
            "DeleteModel": lambda p: self._delete(_MODEL, p),
            "CreateEndpointConfig": self.create_endpoint_config,
            "DescribeEndpointConfig": lambda p: self._describe(_CONFIG, p),
            "ListEndpointConfigs": lambda p: self._list(_CONFIG, p),
            # Allowed while an endpoint uses it: endpoints keep a snapshot of their config.
            "DeleteEndpointConfig": lambda p: self._delete(_CONFIG, p),
        }

    def resource(self, table: str, kind: str, name: str) -> Resource:
        """A model or a config by name, or SageMaker's not-found error for it."""
        resource = self.store.get(table, name)
        if resource is None:
            raise wire.not_found(kind, self.arn(kind, name))
        return resource

    def model(self, name: str) -> Resource:
        return self.resource(MODELS, KIND_MODEL, name)

    def config(self, name: str) -> Resource:
        return self.resource(CONFIGS, KIND_CONFIG, name)

    async def create_model(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.store.get(MODELS, params["ModelName"]) is None and self._image_problem:
            containers = ([params["PrimaryContainer"]] if params.get("PrimaryContainer")
                          else list(params.get("Containers") or []))
            for container in containers:
                problem = await asyncio.to_thread(self._image_problem, container)
                if problem:
                    raise wire.validation_error(problem)
        return self._create(_MODEL, params)

    async def create_endpoint_config(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointConfigName"]
        if self.store.get(CONFIGS, name) is not None:  # named before any missing model
            raise wire.already_exists(KIND_CONFIG, self.arn(KIND_CONFIG, name))
        for variant in params["ProductionVariants"]:
            if variant.get("ModelName"):  # a variant for inference components names none
                model = self.model(variant["ModelName"])
                if params.get("AsyncInferenceConfig") and _is_multi_model(model.doc):
                    raise wire.validation_error(async_inference.not_for_multi_model(
                        self.arn(KIND_MODEL, model.name)))
        return self._create(_CONFIG, params)

    def _create(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        name = params[kind.name_key]
        try:
            self.store.add(kind.table, Resource(name, self._clock(), params))
        except AlreadyExists:
            raise wire.already_exists(kind.kind, self.arn(kind.kind, name)) from None
        return {kind.arn_key: self.arn(kind.kind, name)}

    async def _describe(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        resource = self.resource(kind.table, kind.kind, params[kind.name_key])
        doc = {
            **kind.defaults,
            **resource.doc,
            kind.name_key: resource.name,
            kind.arn_key: self.arn(kind.kind, resource.name),
            "CreationTime": resource.created,
        }
        return wire.output(f"Describe{kind.operation_noun}", doc)

    async def _list(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        page, token = wire.list_page(
            self.store.all(kind.table), params, name=lambda r: r.name, created=lambda r: r.created
        )
        items = [
            {
                kind.name_key: r.name,
                kind.arn_key: self.arn(kind.kind, r.name),
                "CreationTime": r.created,
            }
            for r in page
        ]
        return with_token({kind.list_key: items}, token)

    async def _delete(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        name = params[kind.name_key]
        if not self.store.remove(kind.table, name):
            raise wire.not_found(kind.kind, self.arn(kind.kind, name))
        return {}
