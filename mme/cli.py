"""``mme``: the command line. ``mme serve`` runs the emulator; other features add subcommands.

Every ``serve`` flag is also an environment variable: ``--memory-budget`` is ``MME_MEMORY_BUDGET``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Sequence

from emulator.settings import Settings

# Modules that add their own subcommands with ``add_subcommands(subparsers)``.
SUBCOMMAND_MODULES = (
    "mme.demo",
    "mme.bench",
    "ensembles.cli",
    "harness.cli",
    "harness.deploy_cli",
)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("boto3").setLevel(logging.WARNING)
    logging.getLogger("s3transfer").setLevel(logging.WARNING)


def add_serve(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "serve", help="run the emulator (SageMaker runtime API in front of a real Triton)",
        description="Run a local SageMaker multi-model endpoint. Each flag may also be given as "
                    "an MME_<FLAG> environment variable (e.g. MME_MEMORY_BUDGET=2GiB).",
    )
    p.add_argument("--model-data", help="model store: a folder or s3://bucket/prefix/ "
                                        "(TargetModel is an object path under it)")
    p.add_argument("--s3-endpoint-url", help="S3-compatible server (MinIO, moto, ...)")
    p.add_argument("--region", help="AWS region used in ARNs and messages (us-east-1)")
    p.add_argument("--endpoint-name", help="name of the default endpoint (local)")
    p.add_argument("--instances", type=int,
                   help="instances of the default endpoint, each with its own Triton, cache and "
                        "budgets (1)")
    p.add_argument("--routing-seed", type=int,
                   help="seed of the router's weighted variant choice (random)")
    p.add_argument("--host", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (8080)")
    p.add_argument("--clock-scale", type=float,
                   help="emulated seconds per real second for metric periods, alarms and "
                        "cooldowns: 60 makes a minute pass per second (1)")
    p.add_argument("--memory-budget", help="bytes of models kept loaded, e.g. 2GiB (unlimited)")
    p.add_argument("--max-loaded-models", type=int, help="models kept loaded (unlimited)")
    p.add_argument("--disk-budget", help="bytes of artifacts kept on disk, e.g. 20GiB (unlimited)")
    p.add_argument("--cache-dir", help="disk cache and state (~/.cache/sagemaker-mme-emulator)")
    p.add_argument("--launcher", choices=["embedded", "docker", "external"],
                   help="how Triton runs (embedded)")
    p.add_argument("--tritonserver", help="embedded: a tritonserver binary to use instead")
    p.add_argument("--image", help="docker: the Triton image")
    p.add_argument("--triton-url", help="external: the URL of a Triton you run")
    p.add_argument("--triton-repository",
                   help="external: the model repository folder that Triton serves (it must be "
                        "started with --model-control-mode=explicit on that folder)")
    p.add_argument("--shm-size", help="docker: shared memory for the Python backend (1g)")
    p.add_argument("--docker-mount", dest="docker_mounts", action="append",
                   help="docker: a host folder to mount at the same path (repeatable)")
    p.add_argument("--gpus", choices=["auto", "all", "none"],
                   help="docker: pass GPUs through (auto: when nvidia-smi lists any)")
    p.add_argument("--invocation-timeout", dest="invocation_timeout_s", type=float,
                   help="seconds before a request gets ModelNotReadyException or a timeout (60)")
    p.add_argument("--model-load-timeout", dest="model_load_timeout_s", type=float,
                   help="seconds a model load may take before it fails with a ModelError (360)")
    p.add_argument("--max-extracted-bytes",
                   help="refuse tarballs that expand to more than this, e.g. 100GiB (50GiB)")
    p.add_argument("--log-level", help="DEBUG shows Triton's own log (INFO)")
    p.add_argument("--auth", choices=["off", "sigv4"],
                   help="off (default): accept every request; sigv4: verify SigV4 signatures "
                        "and evaluate each principal's IAM policy")
    p.add_argument("--credentials", help="sigv4: AWS shared-credentials file, one [profile] "
                                         "per principal (arn:aws:iam::<account>:user/<profile>)")
    p.add_argument("--policies", help="sigv4: folder of <profile>.json IAM identity policies")
    p.set_defaults(func=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    names = ("model_data", "s3_endpoint_url", "region", "endpoint_name", "instances",
             "routing_seed", "host", "port", "clock_scale",
             "memory_budget", "max_loaded_models", "disk_budget", "cache_dir", "launcher",
             "tritonserver", "image", "triton_url", "triton_repository", "shm_size", "gpus",
             "docker_mounts", "invocation_timeout_s", "model_load_timeout_s",
             "max_extracted_bytes", "log_level", "auth", "credentials",
             "policies")
    return Settings.from_env(**{n: getattr(args, n, None) for n in names})


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from emulator.app import build_app

    settings = settings_from_args(args)
    configure_logging(settings.log_level)
    logging.getLogger("emulator").info(
        "serving endpoint %r from %s on http://%s:%d (launcher %s)", settings.endpoint_name,
        settings.model_data or "(no model data: use the control plane)", settings.host,
        settings.port, settings.launcher)
    # uvicorn handles Ctrl-C and SIGTERM: the app's lifespan then stops every Triton.
    from emulator.auth import AuthConfigError

    try:
        app = build_app(settings)
    except AuthConfigError as exc:  # a credentials or policy file that cannot be used
        print(f"mme serve: {exc}", file=sys.stderr)
        return 2
    # uvicorn captures SIGINT/SIGTERM, shuts down cleanly, then restores the handlers it found
    # and re-raises the signal: with Python's defaults that would end the process with 143 (or a
    # KeyboardInterrupt). No-op handlers make the re-raise harmless, so a clean stop exits 0.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    uvicorn.run(app, host=settings.host, port=settings.port,
                log_level="warning", timeout_keep_alive=75)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mme", description="A local SageMaker multi-model endpoint in front of a real Triton.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_serve(subparsers)
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).add_subcommands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        configure_logging(getattr(args, "log_level", None) or "INFO")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
