"""Reading ``GET /metrics`` with prometheus_client's own parser, as a Prometheus server would."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """``(type of each family, value of each sample by (sample name, labels))``."""
    with urllib.request.urlopen(f"{url}/metrics") as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    types: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return types, samples


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def get_text(url: str) -> str:
    with urllib.request.urlopen(url) as resp:
        return resp.read().decode()


def get_json(url: str) -> Any:
    return json.loads(get_text(url))
