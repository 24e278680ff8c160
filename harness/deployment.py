"""What a deployment is, shared by the endpoint deployer (``deployer.py``) and the component
deployer (``component_deployer.py``): what to deploy (``DeployConfig``, ``ComponentSpec``), what
came of it (``Artifact``, ``DeployResult``, ``SmokeResult``), how it fails (``DeployError`` and
its kinds), the names of what it creates, a tarball's smoke request, and the calls a component
deployment makes through the deployer (``DeploySteps``)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.model_config import config_input_specs
from harness.model_versions import resource_base

DEFAULT_TRITON_VERSION = "24.09"


class DeployError(RuntimeError):
    """A deployment that cannot go on; the message says what failed and what to do."""


class BadInput(DeployError):
    """What was asked cannot be deployed as given (a flag out of range, flags that do not go
    together); found before any call. ``mme deploy`` exits with 2 for it, as for a bad flag."""


class Interrupted(DeployError):
    """Ctrl-C: the command stopped following, and says what goes on without it. ``kind`` is
    what the endpoint (or component) is doing: ``nothing`` (no change was asked of it), ``done``
    (the change is done; the smoke calls stopped), ``create``, ``update``, ``guarded`` (an update
    with a DeploymentConfig; ``alarms`` roll it back), ``component-create``,
    ``component-update``, ``endpoint-create`` (an endpoint for a component, not yet made).
    ``mme deploy`` exits 130 for it, as a shell does for Ctrl-C."""

    def __init__(self, message: str, kind: str, alarms: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.alarms = list(alarms)


class RolledBack(DeployError):
    """The update was rolled back (an alarm, a timeout, a new fleet that did not start): the
    endpoint serves its previous config. ``mme deploy`` exits with 3 for it."""


@dataclass(frozen=True)
class ComponentSpec:
    """An inference component as ``mme deploy`` makes it: its name, what one copy reserves, how
    many copies, and (for a new endpoint) its variant's instance scaling and routing."""

    name: str
    copies: int = 1
    cpus: float = 1.0  # NumberOfCpuCoresRequired
    memory_mb: int = 1024  # MinMemoryRequiredInMb
    max_memory_mb: int | None = None  # MaxMemoryRequiredInMb
    accelerators: int | None = None  # NumberOfAcceleratorDevicesRequired
    min_instances: int | None = None  # ManagedInstanceScaling (both or neither)
    max_instances: int | None = None
    routing: str | None = None  # RoutingConfig.RoutingStrategy

    def resources(self) -> dict[str, Any]:
        wanted: dict[str, Any] = {"NumberOfCpuCoresRequired": self.cpus,
                                  "MinMemoryRequiredInMb": self.memory_mb}
        if self.max_memory_mb is not None:
            wanted["MaxMemoryRequiredInMb"] = self.max_memory_mb
        if self.accelerators is not None:
            wanted["NumberOfAcceleratorDevicesRequired"] = self.accelerators
        return wanted


@dataclass
class DeployConfig:
    endpoint_name: str
    artifacts: Sequence[Path]
    bucket: str | None = None  # the S3 bucket; None with ``store_dir``
    prefix: str = "models/"
    # The emulator only: a local folder as the model store (ModelDataUrl file://<dir>/<prefix>)
    store_dir: Path | None = None
    instance_type: str = "ml.g5.xlarge"
    instance_count: int = 1
    image_uri: str | None = None
    triton_version: str = DEFAULT_TRITON_VERSION
    role_arn: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    model_cache: bool = True
    variant_name: str = "AllTraffic"
    smoke: bool = True
    # TargetModel -> a KServe JSON request file; others get a request built from config.pbtxt.
    payloads: Mapping[str, Path] = field(default_factory=dict)
    wait_delay_s: float = 30.0
    wait_max_attempts: int = 120
    create_bucket: bool = False
    dry_run: bool = False
    # SageMaker's DeploymentConfig for an update (``deployment_config``); None: a plain update.
    deployment_config: Mapping[str, Any] | None = None
    # Deploy the one artifact as this inference component (harness/component_deployer.py)
    # instead of to a multi-model endpoint.
    component: ComponentSpec | None = None

    def normalized_prefix(self) -> str:
        prefix = self.prefix.strip("/")
        return f"{prefix}/" if prefix else ""


@dataclass(frozen=True)
class Artifact:
    path: Path
    target_model: str
    digest: str
    size: int


@dataclass
class SmokeResult:
    target_model: str
    ok: bool
    detail: str


@dataclass
class DeployResult:
    endpoint_name: str
    model_name: str
    config_name: str
    model_data_url: str
    artifacts: list[Artifact]
    action: str  # created | updated | unchanged | recreated | dry-run
    smoke: list[SmokeResult] = field(default_factory=list)


class DeploySteps(Protocol):
    """The deployer's calls a component deployment makes (``deployer.Deployer`` has them)."""

    clients: Any
    _dry_run: bool

    def _say(self, text: str) -> None: ...

    def _mutate(self, client: Any, operation: str, **params: Any) -> dict[str, Any]: ...

    def _ask(self, operation: str, took: Callable[[], bool], **params: Any) -> bool: ...

    def _read(self, client: Any, operation: str, **params: Any) -> dict[str, Any]: ...

    def _exists(self, operation: str, **params: Any) -> dict[str, Any] | None: ...

    def _create_once(self, kind: str, name: str, **params: Any) -> bool: ...

    def _settled_endpoint(self, config: DeployConfig, name: str) -> dict[str, Any] | None: ...

    def _ask_create_endpoint(self, name: str, config_name: str) -> bool: ...

    def _wait(self, config: DeployConfig, name: str, quiet: bool = False) -> dict[str, Any]: ...

    def _wait_deleted(self, config: DeployConfig, name: str) -> None: ...

    def _store_folder(self, config: DeployConfig) -> Path | None: ...

    def package(self, artifacts: Sequence[Path], work_dir: Path,
                config: DeployConfig | None = None) -> list[Artifact]: ...

    def ensure_bucket(self, bucket: str, create: bool) -> None: ...

    def upload(self, artifacts: Sequence[Artifact], bucket: str, prefix: str) -> int: ...

    def copy_to_folder(self, artifacts: Sequence[Artifact], folder: Path) -> int: ...

    def image_and_role(self, config: DeployConfig) -> tuple[str, str]: ...


# ---------------------------------------------------------------------------------------------
# Names


def definition_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def resource_name(endpoint_name: str, digest: str) -> str:
    return f"{resource_base(endpoint_name)}-{digest[:8]}"


# ---------------------------------------------------------------------------------------------
# Smoke payloads from config.pbtxt


def auto_payload(tarball: Path) -> tuple[bytes, str]:
    """A KServe JSON request for the tarball's entry model (the ensemble, else the only model),
    with random inputs of the declared types and shapes (-1 dimensions become 1)."""
    from harness.payloads import build_request, random_inputs

    entry, _ = entry_model(tarball)
    request = build_request(random_inputs(config_input_specs(entry)), binary=False)
    return request.body, request.content_type


def entry_model(tarball: Path) -> tuple[Any, int]:
    """The config (a ``ModelConfig``) of the tarball's entry model (the ensemble no other
    ensemble uses, else the only model) and how many models the tarball holds."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    configs = []
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if member.isfile() and parts and parts[-1] == "config.pbtxt":
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                config = model_config_pb2.ModelConfig()
                text_format.Parse(handle.read().decode(), config, allow_unknown_field=True)
                if not config.name:
                    config.name = parts[-2] if len(parts) > 1 else tarball.name
                configs.append(config)
    ensembles = [c for c in configs if c.platform == "ensemble"]
    steps = {s.model_name for c in ensembles for s in c.ensemble_scheduling.step}
    entries = [c for c in ensembles if c.name not in steps] or configs
    if len(entries) != 1:
        raise DeployError(
            f"cannot tell the entry model of {tarball.name} ({len(entries)} candidates); "
            "give a payload with --payload TARGET=FILE"
        )
    return entries[0], len(configs)
