"""Every setting, written once: a field here is an ``MME_*`` environment variable, a flag of
``mme serve`` (built by ``add_flags``) and a row of the configuration table in
docs/configuration.md (rendered by ``configuration_table``; ``python -m emulator.settings`` prints
it, a test compares it).

A setting's variable is ``MME_`` + its flag, upper-cased, dashes as underscores
(``--invocation-timeout``: ``MME_INVOCATION_TIMEOUT``); a variable-only setting's is ``MME_`` + its
field name. The few variables once named after the field instead (``MME_INVOCATION_TIMEOUT_S``)
are still read, with a ``DeprecatedVariable`` warning.

Precedence: explicit flags > ``MME_*`` environment variables > the defaults below.
"""

from __future__ import annotations

import argparse
import os
import re
import typing
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

ENV_PREFIX = "MME_"
# Request bodies smaller than this go to Triton over HTTP, not through shared memory (measured:
# emulator/triton/shared_memory.py); --triton-shared-memory must hold at least one of them.
MIN_SHARED_BODY_BYTES = 64 * 1024

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}


def parse_size(text: str | int | None) -> int | None:
    """``"512MiB"`` -> 536870912; ``None``/``""``/``"0"``/``"unlimited"`` -> None (no budget)."""
    if text is None or isinstance(text, int):
        return text or None
    value = text.strip().lower().replace(" ", "")
    if value in ("", "0", "none", "unlimited"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", value)
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 536870912, 512MiB, 4GiB, 1.5GB)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(size: int | None) -> str:
    if size is None:
        return "unlimited"
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:.1f}{unit}"
    return f"{size}B"


def _blank_is_none(value: Any) -> Any:
    """An empty variable (``MME_ROUTING_SEED=``) means "not set"."""
    return None if isinstance(value, str) and not value.strip() else value


def _zero_is_none(value: Any) -> Any:
    """0 (or empty) means "no limit", as for the byte budgets."""
    value = _blank_is_none(value)
    return None if value in (0, "0") else value


def _path_list(value: Any) -> Any:
    """``MME_DOCKER_MOUNT=/a:/b`` (``os.pathsep``-separated) or a list (repeated flags)."""
    if isinstance(value, str):
        return [p for p in value.split(os.pathsep) if p]
    return value


def _image_list(value: Any) -> Any:
    """``MME_IMAGE=uri=local,uri2=local2`` (commas: image references hold ``:``) or a list."""
    value = _blank_is_none(value)
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.replace(",", " ").split() if v]
    return value


def _name_list(value: Any) -> Any:
    """``MME_PRELOAD=a.tar.gz,b.tar.gz`` or repeated flags, each of which may hold commas."""
    value = _blank_is_none(value)
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [name.strip() for item in items for name in str(item).split(",") if name.strip()]


def _checked_images(value: list[str]) -> list[str]:
    parse_image_mappings(value)
    return value


def parse_image_mappings(values: str | Iterable[str] | None) -> tuple[dict[str, str], str | None]:
    """``--image``: ``["URI=LOCAL", ..., "LOCAL"]`` or one string of them separated by commas or
    spaces (``MME_IMAGE``), as (production URI -> local image, the Triton default). The one
    parser of the flag (``containers.images.ImageMap`` is built from it); a key without a tag
    maps every tag of that repository."""
    if values is None:
        return {}, None
    items = values.replace(",", " ").split() if isinstance(values, str) else list(values)
    mappings: dict[str, str] = {}
    default = None
    for item in items:
        item = item.strip()
        if not item:
            continue
        production, sep, local = item.partition("=")
        if not sep:
            if default is not None and default != item:
                raise ValueError(f"--image {item}: a second image without a mapping (the "
                                 f"first was {default}); map production images with "
                                 "--image PRODUCTION_URI=LOCAL_IMAGE")
            default = item
        elif not production or not local:
            raise ValueError(f"--image {item!r}: expected PRODUCTION_URI=LOCAL_IMAGE")
        else:
            mappings[production] = local
    return mappings, default


def _expand(path: Path | None) -> Path | None:
    return path.expanduser() if path is not None else None


Size = Annotated[int | None, BeforeValidator(parse_size)]
OptionalInt = Annotated[int | None, BeforeValidator(_blank_is_none)]
Limit = Annotated[int | None, BeforeValidator(_zero_is_none)]
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]
OptionalUserPath = Annotated[Path | None, AfterValidator(_expand)]


@dataclass(frozen=True)
class Flag:
    """How a setting shows on ``mme serve`` and in docs/configuration.md's table."""

    name: str | None = None  # the flag; None: ``--`` + the field name with dashes
    default_text: str | None = None  # the table's "default" when the value itself says little
    env_only: bool = False  # no flag (rarely changed); still an ``MME_*`` variable
    repeatable: bool = False  # given once per value; the variable separates values with ``:``
    separator: str = ":"  # what separates a repeatable variable's values (image URIs hold ``:``)
    switch: bool = False  # a flag without a value (``--watch``); its variable is ``true``/``false``


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "sagemaker-mme-emulator"


# An explicit mapping given to ``Settings.from_env`` instead of ``os.environ`` (tests use {}).
_ENVIRONMENT: ContextVar[Mapping[str, str] | None] = ContextVar("mme_environment", default=None)


class DeprecatedVariable(FutureWarning):
    """A variable read under a former name. A FutureWarning, which Python shows by default: the
    people who set variables are users of the emulator, not developers of it."""


class _Environment(EnvSettingsSource):
    """``MME_*`` variables from ``os.environ``, or from the mapping ``from_env`` was given, each
    under its flag's name (``env_name``), else under its former name (``former_env_name``)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = _ENVIRONMENT.get()
        if env is None:
            return super()._load_env_vars()
        return parse_env_vars(env, self.case_sensitive, self.env_ignore_empty,
                              self.env_parse_none_str)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        _, key, is_complex = super().get_field_value(field, field_name)
        name, former = env_name(field_name), former_env_name(field_name)
        value = self.env_vars.get(self._apply_case_sensitive(name))
        old = self.env_vars.get(self._apply_case_sensitive(former)) if former else None
        if old is not None:
            if value is None:
                warnings.warn(f"{former} is deprecated: set {name} instead (same value)",
                              DeprecatedVariable, stacklevel=2)
                value = old
            else:
                warnings.warn(f"{former} is ignored: {name} is set too and wins; unset {former}",
                              DeprecatedVariable, stacklevel=2)
        return value, key, is_complex


class Settings(BaseSettings):
    """The emulator's settings; each field's docstring is its help text and table row."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, use_attribute_docstrings=True,
                                      extra="forbid")

    model_data: Annotated[str | None, Flag(default_text="none")] = None
    """model store: a folder or `s3://bucket/prefix/` (TargetModel is an object path under it); without it, create endpoints through the control plane"""  # noqa: E501
    watch: Annotated[bool, Flag(switch=True, default_text="off")] = False
    """the `--model-data` folder is watched: a changed tarball or model folder (config.pbtxt, model.py, a new version folder) is served from its TargetModel's next call, the old version until then; other models stay loaded (docs/inner-loop.md)"""  # noqa: E501
    watch_interval_s: Annotated[float, Field(gt=0), Flag(name="--watch-interval")] = 0.5
    """seconds between two looks at the watched store (each reads the files' modification times and sizes)"""  # noqa: E501
    preload: Annotated[list[str], NoDecode, BeforeValidator(_name_list),
                       Flag(default_text="none", repeatable=True, separator=",")] = Field(
        default_factory=list)
    """TargetModels (`a.tar.gz,b.tar.gz`) of the `--model-data` store downloaded and loaded on every instance of the default endpoint before the server listens, each load's time logged; an unknown one stops the start"""  # noqa: E501
    init: Annotated[OptionalUserPath, Flag(default_text="none")] = None
    """a YAML or JSON file of models, endpoint configs, endpoints, inference components, alarms and scaling, in boto3's terms, applied at start before the server listens; applying it again changes nothing (docs/inner-loop.md)"""  # noqa: E501
    s3_endpoint_url: Annotated[str | None, Flag(default_text="AWS")] = None
    """any S3-compatible server (MinIO, moto, ...)"""
    sns_endpoint_url: Annotated[str | None, Flag(default_text="none")] = None
    """SNS server (moto, LocalStack, ...) that CloudWatch alarm actions on SNS topics publish to; without it they are only recorded in the alarm's history"""  # noqa: E501
    region: str = "us-east-1"
    """AWS region used in ARNs and messages"""
    account_id: Annotated[str, Flag(env_only=True)] = "123456789012"
    """the account in ARNs and error messages"""
    endpoint_name: str = "local"
    """name of the default endpoint"""
    variant_name: Annotated[str, Flag(env_only=True)] = "AllTraffic"
    """the default endpoint's production variant"""
    instances: int = 1
    """instances of the default endpoint; each has its own Triton, disk cache and the budgets below"""  # noqa: E501
    instance_type: Annotated[str | None, BeforeValidator(_blank_is_none),
                             Flag(default_text="none")] = None
    """the default endpoint's InstanceType (`ml.m5.xlarge`): its memory less the platform's share is each instance's memory budget unless `--memory-budget` is given (docs/memory.md)"""  # noqa: E501
    routing_seed: Annotated[OptionalInt, Flag(default_text="random")] = None
    """seeds the weighted choice of variant and data capture's sampling, so a run repeats exactly"""
    host: str = "127.0.0.1"
    """address the emulator listens on"""
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    """port the emulator listens on"""
    listen_fd: Annotated[OptionalInt, Flag(default_text="none")] = None
    """serve on this inherited, already listening socket instead of host and port (a parent that bound the port itself has no race with other servers for it)"""  # noqa: E501
    clock_scale: Annotated[float, Field(gt=0)] = 1.0
    """emulated seconds per real second for metric periods, alarms and cooldowns: 60 makes a minute pass per second"""  # noqa: E501
    memory_budget: Annotated[Size, Flag(default_text="unlimited")] = None
    """bytes of loaded models (`512MiB`, `4GiB`); LRU unloads beyond it"""
    gpu_memory_budget: Annotated[Size, Flag(default_text="the instance type's")] = None
    """bytes of GPU memory for loaded models (`8GiB`); LRU unloads beyond it. Default: a GPU instance type's GPU memory (docs/memory.md, "GPU memory")"""  # noqa: E501
    model_memory: Literal["measured", "files"] = "measured"
    """what a loaded model counts as against the memory budget: `measured` (what its serving processes hold after the load; embedded and docker launchers) or `files` (its extracted files' bytes) (docs/memory.md)"""  # noqa: E501
    max_loaded_models: Annotated[Limit, Flag(default_text="unlimited")] = None
    """loaded models at most"""
    disk_budget: Annotated[Size, Flag(default_text="unlimited")] = None
    """bytes of artifacts on disk; LRU deletes unloaded ones beyond it"""
    cache_dir: Annotated[UserPath, Flag(default_text="`~/.cache/sagemaker-mme-emulator`")] = Field(
        default_factory=_default_cache_dir)
    """disk cache and control-plane state, owned by one running server: a second one on the same folder is refused (give it its own)"""  # noqa: E501
    ephemeral: Annotated[bool, Flag(switch=True, default_text="off")] = False
    """keep no state on disk: the control plane, alarms and Application Auto Scaling live in memory and are gone at exit (the cache folder still holds the endpoints' models while they run)"""  # noqa: E501
    restore: Annotated[OptionalUserPath, Flag(default_text="none")] = None
    """start from the snapshot in this folder (`mme snapshot save`) in place of the state the cache folder holds; a snapshot saved `--with-models` loads its models again before the server answers (docs/testing.md)"""  # noqa: E501
    transitions: Annotated[OptionalUserPath, Flag(default_text="none")] = None
    """a JSON file: a list of transition rules (each a `PUT /_emulator/transitions` body) in force from the start: how long an endpoint's, a component's or a copy's Creating, Updating or Deleting takes, or how it ends (docs/faults.md)"""  # noqa: E501
    record: Annotated[OptionalUserPath, Flag(default_text="none")] = None
    """write every runtime call (time, endpoint, TargetModel or component, body size, content type, status, latencies, cache hit) to this file as JSON Lines, off the hot path, for `mme loadtest --trace` and `mme plan --trace` (docs/record-replay.md); the file is emptied at start"""  # noqa: E501
    record_bodies: Annotated[bool, Flag(switch=True, default_text="off")] = False
    """`--record` also writes each request body (base64), so a replay sends the same bytes"""
    launcher: Literal["embedded", "docker", "external"] = "embedded"
    """how Triton runs: `embedded`, `docker` or `external`"""
    tritonserver: Annotated[str | None, Flag(default_text="the wheel's")] = None
    """embedded: another `tritonserver` binary"""
    image: Annotated[list[str], NoDecode, BeforeValidator(_image_list),
                     AfterValidator(_checked_images),
                     Flag(default_text="none", repeatable=True, separator=",")] = Field(
        default_factory=list)
    """docker: `PRODUCTION_URI=LOCAL_IMAGE` runs a model's image (an ECR URI) as a local one (repeatable); a plain `LOCAL_IMAGE` is the Triton image for Triton containers without a mapping"""  # noqa: E501
    container_startup_timeout_s: Annotated[float | None, Field(gt=0),
                                           Flag(name="--container-startup-timeout",
                                                default_text="`600`")] = None
    """seconds a SageMaker container (docker: any image run with `serve`) may take to answer `GET /ping` before its endpoint fails"""  # noqa: E501
    triton_url: Annotated[str | None, Flag(default_text="none")] = None
    """external: the URL of a Triton you run"""
    triton_repository: Annotated[OptionalUserPath, Flag(default_text="per endpoint")] = None
    """external: the folder your Triton serves (started with `--model-control-mode=explicit` on it)"""  # noqa: E501
    shm_size: str = "1g"
    """docker: `/dev/shm` for the Python backend"""
    gpus: Literal["auto", "all", "none"] = "auto"
    """docker: `auto` (when `nvidia-smi` lists GPUs), `all`, `none`"""
    docker_mounts: Annotated[list[UserPath], NoDecode, BeforeValidator(_path_list),
                             Flag(name="--docker-mount", default_text="none",
                                  repeatable=True)] = Field(default_factory=list)
    """docker: another host folder, mounted at the same path (repeatable)"""
    invocation_timeout_s: Annotated[float, Field(gt=0), Flag(name="--invocation-timeout")] = 60.0
    """seconds before ModelNotReadyException (cold load) or a timeout ModelError"""
    model_load_timeout_s: Annotated[float, Field(gt=0),
                                    Flag(name="--model-load-timeout")] = 360.0
    """seconds a model load may take in Triton before it fails with a ModelError (loading continues past the invocation timeout until then); Triton cannot cancel a load, so its instance's Triton is then recycled (docs/isolation.md)"""  # noqa: E501
    max_payload_bytes: Annotated[int, BeforeValidator(parse_size),
                                 Flag(default_text="`6MiB`", env_only=True)] = 6 * 1024**2
    """largest request body accepted, as SageMaker's 6 MB invocation limit"""
    stream_downloads: Annotated[bool, Flag(env_only=True)] = True
    """extract a model's archive as it downloads; `false`: copy it to disk, then extract it (`mme bench coldstart` compares the two)"""  # noqa: E501
    overlap_count_evictions: Annotated[bool, Flag(env_only=True)] = True
    """under `--max-loaded-models` alone, start a load once Triton has accepted its victim's unload; `false`: wait for the unload to end (`mme bench scale` compares the two)"""  # noqa: E501
    overlap_byte_evictions: Annotated[bool, Flag(env_only=True)] = True
    """under a memory budget, start a load beside its victims' unloads where their memory may be held a moment longer (docs/memory.md); `false`: wait for the unloads to end (`mme bench miss` compares the two)"""  # noqa: E501
    triton_auto_complete: Annotated[bool, Flag(env_only=True)] = True
    """Triton completes each model's configuration as it loads it, as SageMaker's Triton does (a Python model's `auto_complete_config` runs in a process started for it alone: about a second of every load); `false` starts Triton with `--disable-auto-complete-config`, for model repositories whose every `config.pbtxt` is complete (the test suite's). Triton then takes each `config.pbtxt` as written"""  # noqa: E501
    triton_shared_memory: Annotated[Size, Flag(default_text="`64MiB`")] = 64 * 1024**2
    """shared memory through which binary request bodies of 64 KiB or more reach Triton without its socket (embedded; docker when run as root; `0`: every body over HTTP). When it is full a body waits for room (first come, first served; within the call's timeout); only a body longer than the whole region goes over HTTP"""  # noqa: E501
    max_extracted_bytes: Annotated[Size, Flag(default_text="`50GiB`")] = 50 * 1024**3
    """tarballs that expand to more are refused (a gzip-bomb guard; `--disk-budget` also caps it)"""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """`DEBUG` also shows Triton's own log"""
    auth: Literal["off", "sigv4"] = "off"
    """`sigv4`: verify SigV4 signatures and evaluate IAM policies; `off`: accept every request"""
    credentials: Annotated[OptionalUserPath, Flag(default_text="none")] = None
    """sigv4: shared-credentials file, one `[profile]` per principal"""
    policies: Annotated[OptionalUserPath, Flag(default_text="none")] = None
    """sigv4: folder of `<profile>.json` IAM identity policies"""

    @field_validator("instances")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"--instances must be 1 or more, not {value}")
        return value

    @field_validator("instance_type")
    @classmethod
    def _a_known_instance_type(cls, value: str | None) -> str | None:
        from emulator import instance_types  # a leaf: the ml.* types' memory

        if value is not None and instance_types.lookup(value) is None:
            raise ValueError(
                f"--instance-type {value!r}: not an ml.* instance type whose memory the "
                f"emulator knows (examples: ml.m5.xlarge, ml.c5.2xlarge, ml.g5.xlarge); give "
                f"--memory-budget instead")
        return value

    @field_validator("triton_shared_memory", mode="before")
    @classmethod
    def _a_region_size(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "unlimited":
            raise ValueError("--triton-shared-memory needs a size (`64MiB`), or `0` for none")
        return value

    @field_validator("triton_shared_memory")
    @classmethod
    def _room_for_a_body(cls, value: int | None) -> int | None:
        if value is not None and value < MIN_SHARED_BODY_BYTES:
            raise ValueError(f"--triton-shared-memory {value} is smaller than the smallest body "
                             f"that goes through it ({MIN_SHARED_BODY_BYTES >> 10} KiB): give "
                             f"at least {MIN_SHARED_BODY_BYTES >> 10}KiB, or `0` for none")
        return value

    @model_validator(mode="after")
    def _shared_memory_needs_a_triton_here(self) -> Settings:
        if (self.launcher == "external" and self.triton_shared_memory
                and "triton_shared_memory" in self.model_fields_set):
            raise ValueError("--triton-shared-memory: an external Triton cannot map the "
                             "emulator's memory (it may run on another machine); leave the flag "
                             "out or give `0`")
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _Environment(settings_cls)  # no .env or secrets files

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``MME_*`` variables (of ``env``, else the process's), then
        ``overrides`` whose value is not None. Raises ``InvalidSettings`` naming the flag."""
        token = _ENVIRONMENT.set(env)
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            raise InvalidSettings(exc) from None
        finally:
            _ENVIRONMENT.reset(token)


class InvalidSettings(ValueError):
    """A flag or ``MME_*`` variable with a value the emulator cannot honour."""

    def __init__(self, error: ValidationError) -> None:
        problems = []
        for item in error.errors():
            name = str(item["loc"][0]) if item["loc"] else ""
            where = describe(name) if name in Settings.model_fields else name
            message = str(item["msg"]).removeprefix("Value error, ")
            if item["type"] != "value_error":
                message += f" (got {item['input']!r})"
            flag = flag_name(name) if name in Settings.model_fields else None
            problems.append(message if not where or (flag and message.startswith(flag)) else
                            f"{where}: {message}")
        super().__init__("; ".join(problems))


class StartRefused(Exception):
    """A setting whose content the start cannot honour (an ``--init`` entry an API refuses, a
    ``--preload`` model that does not load): ``mme serve`` says it in one line, exit status 2."""


# -- the command line and docs/configuration.md, both from the fields above ----------------------

def _flag_of(info: FieldInfo) -> Flag:
    return next((m for m in info.metadata if isinstance(m, Flag)), Flag())


def flag_name(name: str) -> str | None:
    """``invocation_timeout_s`` -> ``--invocation-timeout``; None for a variable-only setting."""
    flag = _flag_of(Settings.model_fields[name])
    if flag.env_only:
        return None
    return flag.name or "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    """``invocation_timeout_s`` -> ``MME_INVOCATION_TIMEOUT`` (``MME_`` + the flag); a
    variable-only setting: ``MME_`` + the field name (``account_id`` -> ``MME_ACCOUNT_ID``)."""
    flag = flag_name(name)
    return ENV_PREFIX + (flag.removeprefix("--") if flag else name).upper().replace("-", "_")


def former_env_name(name: str) -> str | None:
    """The variable's name before it followed its flag (``MME_INVOCATION_TIMEOUT_S``), still read
    with a warning; None when the two names are the same."""
    former = ENV_PREFIX + name.upper()
    return former if former != env_name(name) else None


def describe(name: str) -> str:
    """How a user sets it: ``--memory-budget / MME_MEMORY_BUDGET``."""
    flag = flag_name(name)
    return f"{flag} / {env_name(name)}" if flag else env_name(name)


def _choices(info: FieldInfo) -> tuple[str, ...] | None:
    if typing.get_origin(info.annotation) is Literal:
        return tuple(str(c) for c in typing.get_args(info.annotation))
    return None


def _default_text(name: str, info: FieldInfo) -> str:
    flag = _flag_of(info)
    if flag.default_text is not None:
        return flag.default_text
    value = info.get_default(call_default_factory=True)
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def flag_fields() -> Iterator[tuple[str, str, FieldInfo]]:
    """``(field name, flag, field)`` for every setting that has a flag, in declaration order."""
    for name, info in Settings.model_fields.items():
        flag = flag_name(name)
        if flag is not None:
            yield name, flag, info


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; values stay strings for ``Settings`` to check (one validator)."""
    for name, flag, info in flag_fields():
        help_text = (info.description or "").replace("`", "").replace("%", "%%")
        choices = _choices(info)  # shown, but checked by Settings (``--log-level debug`` is fine)
        if _flag_of(info).switch:
            parser.add_argument(flag, dest=name, default=None, action="store_const",
                                const="true", help=help_text)
            continue
        metavar = "{" + ",".join(choices) + "}" if choices else flag[2:].upper().replace("-", "_")
        parser.add_argument(flag, dest=name, default=None, metavar=metavar,
                            action="append" if _flag_of(info).repeatable else "store",
                            help=f"{help_text} ({_default_text(name, info).replace('`', '')})")


def configuration_table() -> str:
    """docs/configuration.md's configuration table: one row per setting."""
    rows = ["| flag | env | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        flag = flag_name(name)
        flag_of = _flag_of(info)
        env = f"`{env_name(name)}`" + (f" (`{flag_of.separator}`-separated)"
                                       if flag_of.repeatable else "")
        rows.append(f"| {f'`{flag}`' if flag else '(env only)'} | {env} "
                    f"| {_default_text(name, info)} | {info.description} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(configuration_table(), end="")
