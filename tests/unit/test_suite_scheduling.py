"""How ``make test`` spreads the suite over its workers (tests/conftest.py): a module's tests
stay together, a module's docker half is apart, and the slow kinds of module start first."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.conftest import scope_of, slow_scopes_first


def test_a_module_is_one_scope_and_its_docker_half_another() -> None:
    lifecycle = "tests/integration/test_lifecycle.py"
    assert scope_of(f"{lifecycle}::test_lru[embedded]") == lifecycle
    assert scope_of(f"{lifecycle}::Eviction::test_lru[embedded-2]") == lifecycle
    assert scope_of(f"{lifecycle}::test_lru[docker]") == f"{lifecycle}[docker]"
    assert scope_of(f"{lifecycle}::test_lru[docker-2]") == f"{lifecycle}[docker]"
    # a parameter that only mentions docker is not the docker launcher
    walk = "tests/integration/test_docs_pages.py"
    assert scope_of(f"{walk}::test_every_block[docs/docker.md]") == walk


class _Item(SimpleNamespace):
    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def _items(*nodeids: str, marked: str = "") -> list[Any]:
    return [_Item(nodeid=nodeid, markers={"starts_first"} if marked and nodeid.startswith(marked)
                  else set()) for nodeid in nodeids]


def test_docker_halves_then_short_integration_modules_then_large_unit_modules_in_order() -> None:
    items = _items("tests/unit/test_a.py::test_1",
                   "tests/unit/test_small.py::test_1",
                   "tests/integration/test_many.py::test_1[embedded]",
                   "tests/integration/test_many.py::test_2[embedded]",
                   "tests/integration/test_many.py::test_1[docker]",
                   "tests/integration/test_one_scenario.py::test_it",
                   "tests/unit/test_a.py::test_2")
    slow_scopes_first(items)
    assert [item.nodeid for item in items] == [
        "tests/integration/test_many.py::test_1[docker]",
        "tests/integration/test_one_scenario.py::test_it",
        "tests/integration/test_many.py::test_1[embedded]",
        "tests/integration/test_many.py::test_2[embedded]",
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_a.py::test_2",
        "tests/unit/test_small.py::test_1"]


def test_a_module_marked_starts_first_leads_the_integration_modules() -> None:
    walk = "tests/integration/test_walk.py"
    items = _items("tests/integration/test_one_scenario.py::test_it",
                   *(f"{walk}::test_page[{n}]" for n in range(3)),
                   "tests/integration/test_many.py::test_1[docker]", marked=walk)
    slow_scopes_first(items)
    assert [item.nodeid for item in items] == [
        "tests/integration/test_many.py::test_1[docker]",
        *(f"{walk}::test_page[{n}]" for n in range(3)),
        "tests/integration/test_one_scenario.py::test_it"]
