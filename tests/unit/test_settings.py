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
           "MME_INVOCATION_TIMEOUT": "5"}
    settings = Settings.from_env(env=env, port=9100)
    assert settings.memory_budget == 2 * 1024**3
    assert settings.port == 9100  # the flag wins
    assert settings.max_loaded_models == 3
    assert settings.invocation_timeout_s == 5.0
    assert format_size(settings.memory_budget) == "2.0GiB"


def test_a_variable_is_named_after_its_flag_and_its_former_name_still_works() -> None:
    """MME_ + the flag (``--invocation-timeout``: MME_INVOCATION_TIMEOUT); the name it had
    before (after the field, MME_INVOCATION_TIMEOUT_S) is still honoured, with a warning."""
    from emulator.settings import DeprecatedVariable

    settings = Settings.from_env(env={"MME_INVOCATION_TIMEOUT": "5", "MME_DOCKER_MOUNT": "/a:/b",
                                      "MME_MODEL_LOAD_TIMEOUT": "7",
                                      "MME_CONTAINER_STARTUP_TIMEOUT": "9"})
    assert (settings.invocation_timeout_s, settings.model_load_timeout_s,
            settings.container_startup_timeout_s) == (5.0, 7.0, 9.0)
    assert [str(p) for p in settings.docker_mounts] == ["/a", "/b"]
    with pytest.warns(DeprecatedVariable, match="MME_INVOCATION_TIMEOUT_S is deprecated: set "
                                                "MME_INVOCATION_TIMEOUT"):
        assert Settings.from_env(env={"MME_INVOCATION_TIMEOUT_S": "4"}).invocation_timeout_s == 4
    with pytest.warns(DeprecatedVariable, match="MME_DOCKER_MOUNTS is ignored: MME_DOCKER_MOUNT"):
        settings = Settings.from_env(env={"MME_DOCKER_MOUNTS": "/old",
                                          "MME_DOCKER_MOUNT": "/new"})
    assert [str(p) for p in settings.docker_mounts] == ["/new"]


def test_the_documented_configuration_table_is_the_settings() -> None:
    """Settings are written once: docs/configuration.md's table is rendered from
    ``emulator/settings.py``."""
    from pathlib import Path

    from emulator.settings import configuration_table

    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert configuration_table() in page, (
        "docs/configuration.md's configuration table differs from emulator/settings.py: paste the "
        "output of `python -m emulator.settings` over it")


def test_every_setting_is_a_flag_and_a_variable_with_a_description() -> None:
    from mme.cli import build_parser, settings_from_args

    args = build_parser().parse_args([
        "serve", "--invocation-timeout", "7", "--docker-mount", "/a", "--docker-mount", "/b",
        "--log-level", "debug", "--max-loaded-models", "2"])
    settings = settings_from_args(args)
    assert settings.invocation_timeout_s == 7.0
    assert [str(p) for p in settings.docker_mounts] == ["/a", "/b"]
    assert (settings.log_level, settings.max_loaded_models) == ("DEBUG", 2)
    assert all(info.description for info in Settings.model_fields.values())


def test_a_bad_value_names_its_flag_and_variable() -> None:
    from emulator.settings import InvalidSettings

    with pytest.raises(InvalidSettings, match="--launcher / MME_LAUNCHER: .*'embedded'"):
        Settings.from_env(env={"MME_LAUNCHER": "podman"})
    with pytest.raises(InvalidSettings, match="--clock-scale / MME_CLOCK_SCALE: .*greater than 0"):
        Settings.from_env(env={}, clock_scale=0)


@pytest.mark.parametrize("given, refused", [
    ({"triton_shared_memory": "32KiB"}, "smaller than the smallest body"),
    ({"triton_shared_memory": "unlimited"}, "needs a size"),
    ({"launcher": "external", "triton_url": "http://h:8000", "triton_shared_memory": "64MiB"},
     "an external Triton cannot map"),
])
def test_a_shared_memory_size_the_emulator_cannot_honour_is_refused(
        given: dict[str, str], refused: str) -> None:
    from emulator.settings import InvalidSettings

    with pytest.raises(InvalidSettings, match=refused):
        Settings.from_env(env={}, **given)


def test_shared_memory_defaults_on_and_turns_off_with_zero() -> None:
    assert Settings.from_env(env={}).triton_shared_memory == 64 * 1024**2
    assert Settings.from_env(env={"MME_TRITON_SHARED_MEMORY": "0"}).triton_shared_memory is None
    external = Settings.from_env(env={}, launcher="external", triton_url="http://h:8000")
    assert external.triton_shared_memory  # the default is not the user's: nothing to refuse
