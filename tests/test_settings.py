from __future__ import annotations

import pytest

from emulator.settings import Settings, format_size, parse_size


@pytest.mark.parametrize("text,value", [("512MiB", 512 * 1024**2), ("4GiB", 4 * 1024**3),
                                        ("1.5GB", 1_500_000_000), ("1024", 1024), ("0", None),
                                        ("unlimited", None), (None, None)])
def test_parse_size(text, value) -> None:  # type: ignore[no-untyped-def]
    assert parse_size(text) == value


def test_parse_size_rejects_garbage_with_a_hint() -> None:
    with pytest.raises(ValueError, match="512MiB"):
        parse_size("lots")


def test_environment_then_flags() -> None:
    env = {"MME_MEMORY_BUDGET": "2GiB", "MME_PORT": "9000", "MME_MAX_LOADED_MODELS": "3",
           "MME_INVOCATION_TIMEOUT_S": "5"}
    settings = Settings.from_env(env=env, port=9100)
    assert settings.memory_budget == 2 * 1024**3
    assert settings.port == 9100  # the flag wins
    assert settings.max_loaded_models == 3
    assert settings.invocation_timeout_s == 5.0
    assert format_size(settings.memory_budget) == "2.0GiB"
