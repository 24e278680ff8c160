"""Every setting in one place: CLI flag ``--memory-budget`` is environment ``MME_MEMORY_BUDGET``.

Precedence: explicit CLI flags > ``MME_*`` environment variables > the defaults below.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

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


@dataclass
class Settings:
    # Where TargetModel objects live: a folder, or s3://bucket/prefix/ (read with boto3).
    model_data: str | None = None
    s3_endpoint_url: str | None = None
    region: str = "us-east-1"
    account_id: str = "123456789012"
    endpoint_name: str = "local"
    variant_name: str = "AllTraffic"
    # The default endpoint's instances; each has its own Triton and the budgets below.
    instances: int = 1
    # Seeds the router's weighted variant choice, so a run can be repeated exactly.
    routing_seed: int | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    # Emulated seconds per real second for metric periods, alarms and cooldowns (emulator/clock.py)
    clock_scale: float = 1.0
    # Budgets: None means unlimited. A model's memory size is estimated from its files.
    memory_budget: int | None = None
    max_loaded_models: int | None = None
    disk_budget: int | None = None
    cache_dir: Path = field(
        default_factory=lambda: Path.home() / ".cache" / "sagemaker-mme-emulator")
    launcher: str = "embedded"  # embedded | docker | external
    tritonserver: str | None = None  # embedded: path to a tritonserver binary
    image: str | None = None  # docker: Triton image
    triton_url: str | None = None  # external: a Triton you run
    triton_repository: Path | None = None  # external: the folder that Triton serves
    shm_size: str = "1g"  # docker: /dev/shm for the Python backend
    gpus: str = "auto"  # docker: auto | all | none
    # docker: more host folders mounted at the same path (e.g. what EXECUTION_ENV_PATH names).
    docker_mounts: list[Path] = field(default_factory=list)
    # SageMaker answers ModelNotReadyException when a cold load outlasts the invocation timeout,
    # and keeps loading in the background for up to model_load_timeout_s.
    invocation_timeout_s: float = 60.0
    model_load_timeout_s: float = 360.0
    max_payload_bytes: int = 6 * 1024 * 1024
    # Archives whose *extracted* size is over this are refused (a tar bomb guard).
    max_extracted_bytes: int | None = 50 * 1024**3
    log_level: str = "INFO"
    # Who may call what (emulator/auth): off (default: every request accepted) or sigv4, which
    # verifies signatures against the shared-credentials file and evaluates policies/<profile>.json.
    auth: str = "off"
    credentials: Path | None = None
    policies: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``MME_*`` variables, then ``overrides`` whose value is not None."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"MME_{f.name.upper()}")
            if raw is not None:
                values[f.name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**{k: _coerce(k, v) for k, v in values.items()})

    def __post_init__(self) -> None:
        if int(self.instances) < 1:
            raise ValueError(f"--instances must be 1 or more, not {self.instances}")
        for name in ("memory_budget", "disk_budget", "max_extracted_bytes"):
            setattr(self, name, parse_size(getattr(self, name)))
        self.cache_dir = Path(self.cache_dir).expanduser()
        if isinstance(self.docker_mounts, str):  # MME_DOCKER_MOUNTS=/a:/b
            self.docker_mounts = [Path(p) for p in self.docker_mounts.split(os.pathsep) if p]
        self.docker_mounts = [Path(p).expanduser() for p in self.docker_mounts]
        if self.triton_repository is not None:
            self.triton_repository = Path(self.triton_repository).expanduser()
        for name in ("credentials", "policies"):
            if getattr(self, name) is not None:
                setattr(self, name, Path(getattr(self, name)).expanduser())


def _coerce(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if name in ("port", "instances"):
        return int(value)
    if name == "routing_seed":
        return int(value) if value.strip() else None
    if name == "clock_scale":
        return float(value)
    if name == "max_loaded_models":
        return int(value) if value.strip() not in ("", "0") else None
    if name.endswith("_s"):
        return float(value)
    if name == "max_payload_bytes":
        return parse_size(value)
    return value
