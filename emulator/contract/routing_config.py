"""A production variant's RoutingConfig: the rules between its members that botocore's model
states in words (its shapes already bound each member: RoutingStrategy's enum,
PrefixAwareRoutingConfig.PrefixLength 1024-65536, ConcurrencyThreshold 1-1024).

Pure: one function per endpoint-config kind calls ``problems`` and ``refused``. The wordings are
[U] (AWS publishes none); the rules are the model's:
- PrefixAwareRoutingConfig: "Specify this parameter only when you set RoutingStrategy to
  PREFIX_AWARE";
- PrefixLength and ConcurrencyThreshold: each "Required when RoutingStrategy is PREFIX_AWARE".
KV_AWARE needs the container's view of its KV cache (vLLM's), which no container here has: it
is refused by name, never silently routed another way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEAST_OUTSTANDING_REQUESTS = "LEAST_OUTSTANDING_REQUESTS"
RANDOM = "RANDOM"
PREFIX_AWARE = "PREFIX_AWARE"
KV_AWARE = "KV_AWARE"
NOT_SUPPORTED = (KV_AWARE,)


@dataclass(frozen=True)
class PrefixAwareConfig:
    """PrefixAwareRoutingConfig: how many leading body bytes choose the member, and the
    in-flight calls on it at which a call goes to another."""

    prefix_length: int
    concurrency_threshold: int


def problems(variant: dict[str, Any]) -> list[str]:
    """What is wrong with ``variant``'s RoutingConfig, one sentence each."""
    config = variant.get("RoutingConfig")
    if not isinstance(config, dict):
        return []
    name = variant.get("VariantName")
    strategy = config.get("RoutingStrategy")
    prefix = config.get("PrefixAwareRoutingConfig")
    if prefix is not None and strategy != PREFIX_AWARE:
        return [f"RoutingConfig.PrefixAwareRoutingConfig of production variant {name} applies "
                f"only with RoutingStrategy PREFIX_AWARE (it is {strategy or 'not set'}); "
                "remove it."]
    if strategy != PREFIX_AWARE:
        return []
    prefix = prefix if isinstance(prefix, dict) else {}
    missing = [m for m in ("PrefixLength", "ConcurrencyThreshold") if prefix.get(m) is None]
    if missing:
        return [f"RoutingConfig.PrefixAwareRoutingConfig.{m} is required for production variant "
                f"{name} when RoutingStrategy is PREFIX_AWARE." for m in missing]
    return []


def refused(variant: dict[str, Any]) -> str | None:
    """The strategy of ``variant`` the emulator refuses by name (None: it routes as asked)."""
    config = variant.get("RoutingConfig")
    strategy = config.get("RoutingStrategy") if isinstance(config, dict) else None
    return strategy if strategy in NOT_SUPPORTED else None


def refusal_message(strategy: str) -> str:
    return (f"RoutingStrategy {strategy} is not supported by the emulator: it routes by the "
            "container's KV-cache contents, which only containers such as SageMaker's vLLM "
            "report (docs/sessions-and-routing.md); use LEAST_OUTSTANDING_REQUESTS, RANDOM or "
            "PREFIX_AWARE.")


def strategy_of(variant: dict[str, Any]) -> tuple[str, PrefixAwareConfig | None]:
    """The variant's strategy (AWS's default LEAST_OUTSTANDING_REQUESTS) and, for PREFIX_AWARE,
    its prefix settings (the config validated already)."""
    config = variant.get("RoutingConfig") or {}
    strategy = str(config.get("RoutingStrategy") or LEAST_OUTSTANDING_REQUESTS)
    if strategy != PREFIX_AWARE:
        return strategy, None
    prefix = config["PrefixAwareRoutingConfig"]
    return strategy, PrefixAwareConfig(int(prefix["PrefixLength"]),
                                       int(prefix["ConcurrencyThreshold"]))
