"""SageMaker's cross-member rules meet members of the wrong type: the model's message reports the
type, and the rules neither fail on it (a 500 InternalFailure "unhashable type") nor add to it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emulator.contract.control_plane import ControlPlaneError, parse_request

VARIANT = {"ModelName": "m", "InstanceType": "ml.m5.large", "InitialInstanceCount": 1}


@pytest.mark.parametrize(("operation", "params", "path"), [
    ("CreateEndpointConfig",
     {"EndpointConfigName": "c",
      "ProductionVariants": [{**VARIANT, "VariantName": ["a"]}, {**VARIANT, "VariantName": "b"}]},
     "productionVariants.1.member.variantName"),
    ("UpdateEndpointWeightsAndCapacities",
     {"EndpointName": "e",
      "DesiredWeightsAndCapacities": [{"VariantName": {"a": 1}, "DesiredWeight": 1.0}]},
     "desiredWeightsAndCapacities.1.member.variantName"),
    ("CreateModel",
     {"ModelName": "m", "ExecutionRoleArn": "arn:aws:iam::123456789012:role/r",
      "Containers": [{"Image": "i", "ContainerHostname": ["a"]},
                     {"Image": "i", "ContainerHostname": ["a"]}]},
     "containers.1.member.containerHostname"),
])
def test_a_name_of_the_wrong_type_is_a_validation_error_of_its_member(
        operation: str, params: dict[str, Any], path: str) -> None:
    with pytest.raises(ControlPlaneError) as caught:
        parse_request(f"SageMaker.{operation}", json.dumps(params).encode())
    assert (caught.value.code, caught.value.status) == ("ValidationException", 400)
    assert f"at '{path}' failed to satisfy constraint: Member must be a string" in (
        caught.value.message)
    assert "unique" not in caught.value.message and "only once" not in caught.value.message
