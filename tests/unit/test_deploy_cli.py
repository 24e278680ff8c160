"""``mme deploy``'s own settings: the emulator's URL follows the MME_<FLAG> rule."""

from __future__ import annotations

import pytest

from emulator.settings import DeprecatedVariable
from harness.deploy_cli import emulator_url
from harness.deployer import DEFAULT_EMULATOR_URL


def test_the_emulator_url_is_the_flag_then_mme_emulator_url_then_the_default() -> None:
    env = {"MME_EMULATOR_URL": "http://127.0.0.1:9001"}
    assert emulator_url("http://127.0.0.1:9002", env) == "http://127.0.0.1:9002"
    assert emulator_url(None, env) == "http://127.0.0.1:9001"
    assert emulator_url(None, {}) == DEFAULT_EMULATOR_URL


def test_mme_url_the_former_name_still_works_with_a_warning() -> None:
    with pytest.warns(DeprecatedVariable, match="MME_URL is deprecated: set MME_EMULATOR_URL"):
        assert emulator_url(None, {"MME_URL": "http://127.0.0.1:9003"}) == "http://127.0.0.1:9003"
    both = {"MME_URL": "http://127.0.0.1:9003", "MME_EMULATOR_URL": "http://127.0.0.1:9001"}
    assert emulator_url(None, both) == "http://127.0.0.1:9001"
