"""``SAGEMAKER_TRITON_*`` environment -> tritonserver flags, as SageMaker's Triton ``serve`` does.

On SageMaker, a model's ``Environment`` becomes the container's environment and the image's
``serve`` script turns the ``SAGEMAKER_*`` variables into tritonserver flags (docs/contract.md,
the multi-model container contract). Every launcher applies the same translation, so a model
that relies on, say, ``SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE`` behaves the same here.

Faithful to ``serve`` in three details that matter:
- defaults are applied even when nothing is set (``--model-namespacing=true``,
  ``--allow-grpc=false``, ``--allow-metrics=false``, ``--log-verbose=true``, the Python
  backend's shared-memory sizes);
- ``serve`` expands its flags unquoted, so bash splits every value on whitespace: a value
  with spaces becomes several arguments, and ``SAGEMAKER_TRITON_ADDITIONAL_ARGS`` is split
  the same way (no quote processing);
- an invalid ``SAGEMAKER_TRITON_INFERENCE_TYPE`` stops the container (here: an exception).

The emulator talks KServe v2 HTTP to Triton, not Triton's SageMaker frontend, so the variables
that only configure that frontend (its port, port range, thread count, ping mode) are not
turned into flags unless ``sagemaker_frontend=True``; they are reported in ``ignored`` with the
reason. The whole environment is passed to Triton (and so to Python models) unchanged, as on
SageMaker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

INFERENCE_TYPES = ("infer", "generate", "generate_stream")

# Variables that configure only Triton's SageMaker HTTP frontend (port 8080 in the image).
FRONTEND_ONLY = {
    "SAGEMAKER_BIND_TO_PORT": "--sagemaker-port",
    "SAGEMAKER_SAFE_PORT_RANGE": "--sagemaker-safe-port-range",
    "SAGEMAKER_TRITON_THREAD_COUNT": "--sagemaker-thread-count",
}
FRONTEND_REASON = (
    "configures Triton's SageMaker frontend, which the emulator replaces (it talks KServe v2 HTTP)"
)

# (variable, flag, default used by `serve` when the variable is unset or empty)
_SIMPLE_FLAGS: tuple[tuple[str, str, str | None], ...] = (
    ("SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING", "--model-namespacing", "true"),
    ("SAGEMAKER_BIND_TO_PORT", "--sagemaker-port", None),
    ("SAGEMAKER_SAFE_PORT_RANGE", "--sagemaker-safe-port-range", None),
    ("SAGEMAKER_TRITON_ALLOW_GRPC", "--allow-grpc", "false"),
    ("SAGEMAKER_TRITON_ALLOW_METRICS", "--allow-metrics", "false"),
    ("SAGEMAKER_TRITON_METRICS_PORT", "--metrics-port", None),
    ("SAGEMAKER_TRITON_GRPC_PORT", "--grpc-port", None),
    ("SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT", "--buffer-manager-thread-count", None),
    ("SAGEMAKER_TRITON_THREAD_COUNT", "--sagemaker-thread-count", None),
    ("SAGEMAKER_TRITON_LOG_VERBOSE", "--log-verbose", "true"),
    ("SAGEMAKER_TRITON_LOG_INFO", "--log-info", None),
    ("SAGEMAKER_TRITON_LOG_WARNING", "--log-warning", None),
    ("SAGEMAKER_TRITON_LOG_ERROR", "--log-error", None),
    ("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE", "--backend-config=python,shm-default-byte-size",
     "16777216"),
    ("SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE", "--backend-config=python,shm-growth-byte-size",
     "1048576"),
    ("SAGEMAKER_TRITON_TENSORFLOW_VERSION", "--backend-config=tensorflow,version", None),
)


class SageMakerEnvironmentError(ValueError):
    """The environment would make SageMaker's ``serve`` exit; the message says which variable."""


@dataclass(frozen=True)
class TritonArgs:
    # Flags for tritonserver, in serve's order; launchers append them after their own flags,
    # so where both set the same flag the model's environment wins, as on SageMaker.
    args: list[str]
    # The environment for Triton's process or container (Python models read it).
    passthrough_env: dict[str, str]
    # Ping semantics SageMaker would use: "live" for MME unless overridden, "ready" for SME.
    ping_mode: str = "ready"
    # SME: the model `serve` would load (`--load-model`); None for MME.
    default_model_name: str | None = None
    inference_type: str = "infer"
    # Variable -> why it has no flag here (see FRONTEND_ONLY and the SME-only variables).
    ignored: dict[str, str] = field(default_factory=dict)


def _is_set(env: Mapping[str, str], name: str) -> bool:
    # `[ -n "$VAR" ]`: an empty value counts as unset.
    return bool(env.get(name, ""))


def _without_startup_loads(words: list[str], ignored: dict[str, str]) -> str:
    """``SAGEMAKER_TRITON_ADDITIONAL_ARGS`` of a multi-model endpoint, checked for
    ``--load-model``: SageMaker's ``serve`` starts Triton on an empty repository there
    (``/tmp/sagemaker``; every model arrives by TargetModel), so a named model is not found and
    Triton exits at start ("failed to load all models"), unless ``--exit-on-error=false``
    lets it go on without the model. ``--load-model=*`` loads the empty repository: nothing.
    Raises for the first case; drops the flags (said in ``ignored``) for the others."""
    named: list[str] = []
    kept: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--load-model" and index + 1 < len(words):
            named.append(words[index + 1])
            index += 2
            continue
        if word.startswith("--load-model="):
            named.append(word.split("=", 1)[1])
        else:
            kept.append(word)
        index += 1
    models = [name for name in named if name != "*"]
    if models and "--exit-on-error=false" not in kept:
        raise SageMakerEnvironmentError(
            f"SAGEMAKER_TRITON_ADDITIONAL_ARGS asks Triton to load {', '.join(models)} at start "
            "(--load-model), but on a multi-model endpoint SageMaker's Triton starts on an "
            "empty model repository: it finds no such model and exits (\"failed to load all "
            "models\"), and the endpoint fails. Remove --load-model: each model of a "
            "multi-model endpoint loads on its first request by TargetModel")
    if named:
        ignored["SAGEMAKER_TRITON_ADDITIONAL_ARGS"] = (
            f"--load-model={', '.join(named)} dropped: the multi-model repository is empty at "
            "start, so it loads nothing (with --exit-on-error=false Triton starts without it)")
    return " ".join(kept)


def triton_args_from_environment(
    env: Mapping[str, str],
    *,
    multi_model: bool = True,
    gpu_count: int = 0,
    sagemaker_frontend: bool = False,
) -> TritonArgs:
    """Translate a model's ``Environment`` the way SageMaker's Triton ``serve`` script does.

    ``gpu_count`` stands for ``nvidia-smi -L | wc -l`` (used by
    ``SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT``); pass what the launcher sees.
    """
    words: list[str] = []
    ignored: dict[str, str] = {}
    for name, flag, default in _SIMPLE_FLAGS:
        if name in FRONTEND_ONLY and not sagemaker_frontend:
            if _is_set(env, name):
                ignored[name] = FRONTEND_REASON
            continue
        value = env[name] if _is_set(env, name) else default
        if value is not None:
            # Built as one string and split below, as bash splits serve's unquoted $SAGEMAKER_ARGS.
            words.append(f"{flag}={value}")

    if _is_set(env, "SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT"):
        limit = env["SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT"]
        if gpu_count == 0:
            ignored["SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT"] = "no GPU: serve adds no flag either"
        for index in range(gpu_count):
            words.append(f"--model-load-gpu-limit {index}:{limit}")

    if _is_set(env, "SAGEMAKER_TRITON_ADDITIONAL_ARGS"):
        additional = env["SAGEMAKER_TRITON_ADDITIONAL_ARGS"]
        if multi_model:
            additional = _without_startup_loads(additional.split(), ignored)
        words.append(additional)

    inference_type = env.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "") or "infer"
    if inference_type not in INFERENCE_TYPES:
        raise SageMakerEnvironmentError(
            f"Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{inference_type}': must be one of "
            f"{', '.join(INFERENCE_TYPES)} (SageMaker's serve exits with status 1)"
        )

    default_model: str | None = None
    if multi_model:
        ping_mode = env.get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE", "") or "live"
        if _is_set(env, "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"):
            ignored["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = "single-model endpoints only"
    else:
        # serve reads the override only in MME mode; the server's own default is "ready".
        ping_mode = "ready"
        if _is_set(env, "SAGEMAKER_TRITON_OVERRIDE_PING_MODE"):
            ignored["SAGEMAKER_TRITON_OVERRIDE_PING_MODE"] = "multi-model endpoints only"
        default_model = env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "") or None
    if not sagemaker_frontend:
        for name in ("SAGEMAKER_TRITON_OVERRIDE_PING_MODE", "SAGEMAKER_TRITON_INFERENCE_TYPE"):
            if _is_set(env, name) and name not in ignored:
                ignored[name] = (
                    "read by Triton's SageMaker frontend; the emulator applies it itself "
                    "(see TritonArgs.ping_mode / inference_type)"
                )

    return TritonArgs(
        args=" ".join(words).split(),
        passthrough_env=dict(env),
        ping_mode=ping_mode,
        default_model_name=default_model,
        inference_type=inference_type,
        ignored=ignored,
    )
