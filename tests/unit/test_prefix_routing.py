"""PREFIX_AWARE routing: the choice (a prefix keeps its member until the member has
ConcurrencyThreshold calls in flight, then spills to the least busy), its cost against the plain
least-outstanding choice (printed, never asserted), and RoutingConfig's validation for both
kinds of endpoint config, as botocore's model states it. No Triton."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.contract import control_plane as wire
from emulator.contract import inference_components as component_rules
from emulator.contract import routing_config, runtime
from emulator.contract.body import Body
from emulator.contract.control_plane import ControlPlaneError
from emulator.contract.routing_config import PrefixAwareConfig
from emulator.hosting.endpoint import Variant
from emulator.hosting.prefix_routing import PREFIX, SPILLED, PrefixAware, prefix_key
from emulator.hosting.routing import Router
from emulator.hosting.spec import ContainerSpec, EndpointSpec, VariantSpec
from emulator.metrics import EndpointMetrics
from mme.bench_routing import measure


@dataclass
class Unit:
    id: str
    in_flight: int = 0


def _units(count: int = 3) -> list[Unit]:
    return [Unit(f"i-{n}") for n in range(1, count + 1)]


def _prompt(shared: str, tail: str, length: int = 1024) -> bytes:
    return shared.encode().ljust(length, b".") + tail.encode()


def test_calls_sharing_a_prefix_land_on_one_member_until_the_threshold_then_spill() -> None:
    units = _units()
    strategy = PrefixAware(PrefixAwareConfig(prefix_length=1024, concurrency_threshold=2))
    chosen = [strategy.choose(units, _prompt("system prompt A", f"question {n}"))
              for n in range(20)]
    assert {(u.id, why) for u, why in chosen} == {(chosen[0][0].id, PREFIX)}
    home = chosen[0][0]
    home.in_flight = 2  # reaches the threshold: the next call goes to the least busy other
    others = [u for u in units if u is not home]
    others[0].in_flight = 1
    spilled, why = strategy.choose(units, _prompt("system prompt A", "one more"))
    assert (spilled, why) == (others[1], SPILLED)
    home.in_flight = 1  # under it again: back home
    assert strategy.choose(units, _prompt("system prompt A", "later"))[0] is home


def test_every_member_at_the_threshold_spills_to_the_least_busy() -> None:
    units = _units()
    for unit, busy in zip(units, (5, 3, 4), strict=True):
        unit.in_flight = busy
    strategy = PrefixAware(PrefixAwareConfig(1024, 2))
    assert strategy.choose(units, b"x" * 2000) == (units[1], SPILLED)


def test_prefixes_spread_and_a_prefix_aware_id_tells_same_prefixes_apart() -> None:
    units = _units()
    strategy = PrefixAware(PrefixAwareConfig(1024, 8))
    homes = Counter(strategy.choose(units, _prompt(f"tenant {n}", ""))[0].id
                    for n in range(300))
    assert set(homes) == {"i-1", "i-2", "i-3"} and min(homes.values()) > 50
    body = _prompt("shared", "")
    by_id = {strategy.choose(units, body, f"app-{n}")[0].id for n in range(30)}
    assert len(by_id) > 1  # the same prefix, different applications: not all on one member


def test_only_the_first_prefix_length_bytes_count_and_pieces_hash_as_the_whole() -> None:
    head = b"p" * 4096
    assert prefix_key(head + b"a", 4096, None) == prefix_key(head + b"b", 4096, None)
    assert prefix_key(head + b"a", 4097, None) != prefix_key(head + b"b", 4097, None)
    whole = bytes(range(256)) * 8
    assert prefix_key(Body([whole[:100], whole[100:]]), 1024, None) == prefix_key(
        whole, 1024, None)


def test_a_member_leaving_moves_only_its_own_prefixes() -> None:
    units = _units(4)
    strategy = PrefixAware(PrefixAwareConfig(1024, 8))
    bodies = [_prompt(f"conversation {n}", "") for n in range(200)]
    before = [strategy.choose(units, b)[0].id for b in bodies]
    after = [strategy.choose(units[:3], b)[0].id for b in bodies]
    moved = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert moved and all(a == "i-4" for a, _ in moved)


def test_the_choice_costs_microseconds_beside_least_outstanding() -> None:
    """The figure (prefix-aware routing's choice under 10 µs per call; ``mme bench routing``)
    is printed, with the plain least-outstanding choice of the same members in the same run;
    no absolute time is asserted (a loaded runner is slower)."""
    cost = measure(members=3, calls=20000, prefix_length=1024)
    print(f"\nchoice per call, 3 members, 1,024-byte prefix: PREFIX_AWARE "
          f"{cost.prefix_aware_us:.2f} µs, LEAST_OUTSTANDING_REQUESTS "
          f"{cost.least_outstanding_us:.2f} µs")
    assert cost.prefix_aware_us > 0 and cost.least_outstanding_us > 0


# --- RoutingConfig validation ----------------------------------------------------------------

COMPONENT_VARIANT = {"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",
                     "InitialInstanceCount": 1}
MODEL_VARIANT = {**COMPONENT_VARIANT, "ModelName": "m"}


def _refused(variant: dict[str, Any]) -> str:
    body = json.dumps({"EndpointConfigName": "cfg", "ProductionVariants": [variant]}).encode()
    parse = (component_rules.parse_request if "ModelName" not in variant
             else wire.parse_request)
    with pytest.raises(ControlPlaneError) as raised:
        parse("SageMaker.CreateEndpointConfig", body)
    assert raised.value.code == "ValidationException"
    return raised.value.message


@pytest.mark.parametrize("variant", [COMPONENT_VARIANT, MODEL_VARIANT],
                         ids=["components", "models"])
@pytest.mark.parametrize(("prefix", "expected"), [
    ({"PrefixLength": 1023, "ConcurrencyThreshold": 4},
     "Member must have value greater than or equal to 1024"),
    ({"PrefixLength": 65537, "ConcurrencyThreshold": 4},
     "Member must have value less than or equal to 65536"),
    ({"PrefixLength": 1024, "ConcurrencyThreshold": 0},
     "Member must have value greater than or equal to 1"),
    ({"PrefixLength": 1024, "ConcurrencyThreshold": 1025},
     "Member must have value less than or equal to 1024"),
    ({"ConcurrencyThreshold": 4}, "PrefixLength is required"),
    ({"PrefixLength": 1024}, "ConcurrencyThreshold is required"),
    (None, "PrefixLength is required"),
])
def test_prefix_aware_settings_are_validated_as_botocores_model_says(
        variant: dict[str, Any], prefix: dict[str, Any] | None, expected: str) -> None:
    config: dict[str, Any] = {"RoutingStrategy": "PREFIX_AWARE"}
    if prefix is not None:
        config["PrefixAwareRoutingConfig"] = prefix
    assert expected in _refused({**variant, "RoutingConfig": config})


@pytest.mark.parametrize("variant", [COMPONENT_VARIANT, MODEL_VARIANT],
                         ids=["components", "models"])
def test_kv_aware_is_refused_by_name_and_prefix_settings_need_prefix_aware(
        variant: dict[str, Any]) -> None:
    message = _refused({**variant, "RoutingConfig": {"RoutingStrategy": "KV_AWARE"}})
    assert "RoutingStrategy KV_AWARE" in message and "not supported by the emulator" in message
    message = _refused({**variant, "RoutingConfig": {
        "RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS",
        "PrefixAwareRoutingConfig": {"PrefixLength": 1024, "ConcurrencyThreshold": 4}}})
    assert "applies only with RoutingStrategy PREFIX_AWARE" in message


def test_a_valid_prefix_aware_config_is_taken_and_read() -> None:
    variant = {**MODEL_VARIANT, "RoutingConfig": {
        "RoutingStrategy": "PREFIX_AWARE",
        "PrefixAwareRoutingConfig": {"PrefixLength": 2048, "ConcurrencyThreshold": 3}}}
    body = json.dumps({"EndpointConfigName": "cfg", "ProductionVariants": [variant]}).encode()
    wire.parse_request("SageMaker.CreateEndpointConfig", body)
    assert routing_config.strategy_of(variant) == ("PREFIX_AWARE", PrefixAwareConfig(2048, 3))
    assert routing_config.strategy_of(MODEL_VARIANT) == ("LEAST_OUTSTANDING_REQUESTS", None)


# --- a variant's instances ------------------------------------------------------------------


@dataclass
class FakeInstance:
    id: str
    in_flight: int = 0
    draining: bool = False


def _variant(routing: str, prefix: PrefixAwareConfig | None = None) -> Variant:
    spec = VariantSpec("AllTraffic", ContainerSpec("file:///m.tar.gz", mode="SingleModel"),
                       instance_count=3, routing=routing, prefix=prefix)
    variant = Variant(spec, EndpointMetrics("ep", "AllTraffic"), Path("/nowhere"), "ep",
                      Router(seed=7))
    variant.instances = [FakeInstance(f"i-{n}") for n in (1, 2, 3)]  # type: ignore[list-item]  # stand-ins
    return variant


def _routed(variant: Variant, body: bytes, **headers: str) -> tuple[str, str | None]:
    request = runtime.parse_invoke("ep", headers, body, 1 << 20, "r-1")
    unit, target, routed_by = variant.route(request)
    assert target is None
    return unit.id, routed_by


def test_a_variants_routing_config_picks_its_instances() -> None:
    prefix = _variant("PREFIX_AWARE", PrefixAwareConfig(1024, 2))
    body = _prompt("shared system prompt", "")
    assert len({_routed(prefix, body + str(n).encode()) for n in range(10)}) == 1
    assert _routed(prefix, body)[1] == "PREFIX_AWARE"
    random = _variant("RANDOM")
    drawn = Counter(_routed(random, body)[0] for _ in range(60))
    assert set(drawn) == {"i-1", "i-2", "i-3"}
    assert _routed(random, body)[1] is None
    least = _variant("LEAST_OUTSTANDING_REQUESTS")
    assert [_routed(least, body)[0] for _ in range(3)] == ["i-1", "i-2", "i-3"]  # in turn
    least.sessions.open("s-1", "i-2")
    assert {_routed(least, body, **{"x-amzn-sagemaker-session-id": "s-1"}) for _ in range(5)} \
        == {("i-2", "SESSION")}


def test_a_variants_routing_survives_its_stored_form() -> None:
    spec = EndpointSpec("ep", (VariantSpec("AllTraffic", ContainerSpec("file:///m"),
                                           routing="PREFIX_AWARE",
                                           prefix=PrefixAwareConfig(2048, 3)),))
    again = EndpointSpec.from_doc(json.loads(json.dumps(spec.to_doc())))
    assert again == spec
    old = spec.to_doc()
    for variant in old["variants"]:  # a spec stored before RoutingConfig was honoured
        del variant["routing"], variant["prefix"]
    assert EndpointSpec.from_doc(old).variants[0].routing == "LEAST_OUTSTANDING_REQUESTS"
