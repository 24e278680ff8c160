"""``mme deploy`` and ``mme teardown``: the shared deployer on the command line.

    mme deploy --target local --endpoint-name demo ./repos/resnet ./repos/bert.tar.gz
    mme deploy --target local --s3-endpoint-url http://127.0.0.1:9000 --bucket models \\
        --prefix demo/ --endpoint-name demo ./repos/resnet ./repos/bert.tar.gz
    mme deploy --target aws --role-arn arn:aws:iam::<acct>:role/<role> --bucket <b> ...
    mme teardown --target aws --endpoint-name demo [--bucket <b> --prefix demo/]
    mme deploy --target local --endpoint-name demo --traffic canary --canary-size 10% \
        --bake 300 --rollback-alarm demo-errors ./repos/resnet       # a guarded update
    mme deploy --target local --endpoint-name shared --inference-component resnet \
        --copies 2 --cpus 1 --memory-mb 2048 ./repos/resnet          # an inference component
    mme teardown --target local --endpoint-name shared [--inference-component resnet]

    mme deploy --target local --endpoint-name demo --follow     # after Ctrl-C stopped following

A guarded update reports each step and exits with 3 when it was rolled back (1 for any other
failure), on the emulator and on SageMaker alike. Flags that cannot go together or are out of
SageMaker's ranges exit with 2 before any call, as argparse does for a malformed flag. Ctrl-C
stops following, not the deployment: it says so, prints the commands that follow and stop it,
and exits with 130.

Wire-in: ``add_subcommands(subparsers)`` adds both commands; each sets ``func`` (a function of the
parsed arguments returning the exit code), as ``mme.cli`` expects.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.component_deployer import ROUTING_STRATEGIES, check_component
from harness.deploy_checks import check_container, check_guarded, check_instance_type
from harness.deployer import (
    DEFAULT_EMULATOR_URL,
    DEFAULT_STORE_DIR,
    TRITON_VERSIONS,
    Deployer,
    deployment_config,
    make_clients,
)
from harness.deployment import (
    DEFAULT_TRITON_VERSION,
    BadInput,
    ComponentSpec,
    DeployConfig,
    DeployError,
    Interrupted,
    RolledBack,
)

EXIT_ROLLED_BACK = 3
EXIT_BAD_INPUT = 2  # argparse's own code for a bad flag
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        choices=("local", "aws"),
        required=True,
        help="local: the emulator and an S3-compatible server; aws: SageMaker",
    )
    parser.add_argument("--endpoint-name", required=True)
    parser.add_argument("--region", help="AWS region (default: the session's, us-east-1 locally)")
    parser.add_argument("--profile", help="AWS profile of the boto3 session")
    parser.add_argument(
        "--emulator-url",
        default=None,
        help="--target local: the emulator's URL (env MME_EMULATOR_URL; default "
        f"{DEFAULT_EMULATOR_URL}, where a plain `mme serve` listens)",
    )
    parser.add_argument(
        "--s3-endpoint-url",
        default=os.environ.get("MME_S3_ENDPOINT_URL"),
        help="--target local: an S3-compatible server (env MME_S3_ENDPOINT_URL)",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="--target local without --bucket: the local folder that stands for the bucket "
        f"(default {DEFAULT_STORE_DIR}); the emulator reads it, no S3 server is needed",
    )
    parser.add_argument(
        "--wait-delay",
        type=float,
        default=None,
        help="seconds between status polls (default 30 on aws, 1 locally)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the AWS calls that would change something, make none",
    )


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deploy = subparsers.add_parser(
        "deploy",
        help="package, upload and deploy Triton models to a multi-model endpoint",
        description="Package model repositories (or take tarballs), upload them under an S3 "
        "prefix, create or update a SageMaker multi-model endpoint and smoke-invoke every model.",
    )
    deploy.add_argument(
        "artifacts",
        nargs="*",
        type=Path,
        help="Triton model repositories, model folders or .tar.gz files",
    )
    deploy.add_argument(
        "--follow",
        action="store_true",
        help="deploy nothing: follow what the endpoint (or --inference-component) is doing "
        "until it is done, as a deployment does (after Ctrl-C stopped one)",
    )
    _common(deploy)
    deploy.add_argument(
        "--bucket",
        help="S3 bucket the tarballs are uploaded to (required on aws; locally without it "
        "they are copied to --store-dir)",
    )
    deploy.add_argument(
        "--prefix",
        default=None,
        help="S3 prefix (or folder under --store-dir) = the ModelDataUrl (default models/ in "
        "a bucket, <endpoint-name>/ in the store folder)",
    )
    deploy.add_argument("--image-uri", help="container image (default: the SageMaker Triton image)")
    deploy.add_argument(
        "--triton-version",
        default=DEFAULT_TRITON_VERSION,
        choices=TRITON_VERSIONS,
        help="SageMaker Triton image version",
    )
    deploy.add_argument("--instance-type", default="ml.g5.xlarge")
    deploy.add_argument("--instance-count", type=int, default=1)
    deploy.add_argument("--role-arn", help="SageMaker execution role (required on aws)")
    deploy.add_argument(
        "--env",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="container Environment entry (repeatable)",
    )
    deploy.add_argument(
        "--model-cache",
        choices=("enabled", "disabled"),
        default="enabled",
        help="MultiModelConfig.ModelCacheSetting",
    )
    deploy.add_argument(
        "--payload",
        type=_key_value,
        action="append",
        default=[],
        metavar="TARGET=FILE",
        help="KServe JSON request for one TargetModel's smoke invocation",
    )
    deploy.add_argument("--no-smoke", action="store_true", help="skip the smoke invocations")
    deploy.add_argument(
        "--create-bucket",
        action="store_true",
        help="create the bucket if missing (default on --target local)",
    )
    deploy.add_argument("--no-progress", action="store_true", help="no upload progress bars")
    guarded = deploy.add_argument_group(
        "guarded update (UpdateEndpoint with a DeploymentConfig; used when the endpoint exists)")
    guarded.add_argument(
        "--traffic", choices=("all-at-once", "canary", "linear"),
        help="blue/green traffic shifting: all at once, a canary then the rest, or linear steps")
    guarded.add_argument("--canary-size", metavar="N|P%",
                         help="the canary: instances (1) or a percentage of capacity (10%%)")
    guarded.add_argument("--linear-step-size", metavar="N|P%",
                         help="each linear step: instances or a percentage of capacity")
    guarded.add_argument("--bake", type=int, default=None, metavar="SECONDS",
                         help="baking period of each step (WaitIntervalInSeconds, 0-3600)")
    guarded.add_argument("--termination-wait", type=int, default=None, metavar="SECONDS",
                         help="TerminationWaitInSeconds before the old fleet stops")
    guarded.add_argument("--max-execution-timeout", type=int, default=None, metavar="SECONDS",
                         help="MaximumExecutionTimeoutInSeconds (600-28800)")
    guarded.add_argument("--rollback-alarm", action="append", default=[], metavar="ALARM",
                         help="CloudWatch alarm that rolls the update back (repeatable, 1-10)")
    component = deploy.add_argument_group(
        "inference component (one repository deployed as a component of an endpoint for "
        "components, created or reused; docs/deploy.md)")
    component.add_argument("--inference-component", metavar="NAME",
                           help="deploy the one artifact as this inference component")
    numbers: tuple[tuple[str, type[float], str], ...] = (  # each None unless given
        ("--copies", int, "RuntimeConfig.CopyCount (default 1)"),
        ("--cpus", float, "NumberOfCpuCoresRequired per copy (default 1, at least 0.25)"),
        ("--memory-mb", int, "MinMemoryRequiredInMb per copy (default 1024, at least 128)"),
        ("--max-memory-mb", int, "MaxMemoryRequiredInMb per copy"),
        ("--accelerators", int, "NumberOfAcceleratorDevicesRequired per copy"),
        ("--min-instances", int, "a new endpoint's ManagedInstanceScaling MinInstanceCount"),
        ("--max-instances", int, "a new endpoint's ManagedInstanceScaling MaxInstanceCount"),
    )
    for flag, kind, text in numbers:
        component.add_argument(flag, type=kind, default=None, help=text)
    component.add_argument("--routing", type=str.upper, default=None,
                           choices=ROUTING_STRATEGIES,
                           help="a new endpoint's RoutingConfig.RoutingStrategy")
    deploy.set_defaults(func=run_deploy)

    teardown = subparsers.add_parser(
        "teardown", help="delete an endpoint and the models and configs deployed for it"
    )
    _common(teardown)
    teardown.add_argument(
        "--bucket",
        help="also delete uploaded objects in this bucket (locally without it: the copies "
        "in --store-dir)",
    )
    teardown.add_argument(
        "--prefix",
        default=None,
        help="... under this prefix (default: all of it in a bucket, <endpoint-name>/ in the "
        "store folder)",
    )
    teardown.add_argument(
        "--artifact",
        action="append",
        default=[],
        metavar="TARGET_MODEL",
        help="delete only these objects (default: everything under --prefix)",
    )
    teardown.add_argument(
        "--inference-component",
        metavar="NAME",
        help="delete only this inference component (and its model); the endpoint goes too "
        "when no other component is left on it (default: every component, then the endpoint)",
    )
    teardown.set_defaults(func=run_teardown)


def emulator_url(flag: str | None, env: Mapping[str, str] = os.environ) -> str:
    """--emulator-url, else MME_EMULATOR_URL (MME_ + the flag), else MME_URL (its former name,
    which the README gave: still read, with a warning), else where a plain ``mme serve`` listens."""
    if flag:
        return flag
    if env.get("MME_EMULATOR_URL"):
        return env["MME_EMULATOR_URL"]
    if env.get("MME_URL"):
        from emulator.settings import DeprecatedVariable  # here: the settings load pydantic

        warnings.warn("MME_URL is deprecated: set MME_EMULATOR_URL instead (same value)",
                      DeprecatedVariable, stacklevel=2)
        return env["MME_URL"]
    return DEFAULT_EMULATOR_URL


def _deployer(args: argparse.Namespace) -> Deployer:
    import boto3

    url = emulator_url(args.emulator_url)
    if args.target == "local":
        check_emulator(url)
    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    clients = make_clients(session, args.target, url, args.s3_endpoint_url)
    return Deployer(clients, progress=not getattr(args, "no_progress", False))


def check_emulator(url: str) -> None:
    """DeployError unless an emulator answers at ``url`` (before anything is packaged)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/ping", timeout=5) as response:
            if response.status == 200:
                return
    except (urllib.error.URLError, OSError, ValueError):
        pass
    raise DeployError(f"no emulator answers at {url}: start one with `mme serve` (in another "
                      "terminal), or give its address with --emulator-url")


def _store(args: argparse.Namespace) -> tuple[Path | None, str]:
    """Where the tarballs go: (a local store folder or None for S3, the prefix)."""
    if args.target != "local" or args.bucket:
        if args.store_dir is not None:
            raise DeployError("give --bucket (S3) or --store-dir (a local folder), not both; "
                              "--store-dir is for --target local only")
        return None, args.prefix if args.prefix is not None else "models/"
    if args.s3_endpoint_url:
        raise DeployError("--s3-endpoint-url needs --bucket (or leave both out: the tarballs "
                          "then go to a local folder the emulator reads)")
    folder = args.store_dir if args.store_dir is not None else DEFAULT_STORE_DIR
    return folder, args.prefix if args.prefix is not None else f"{args.endpoint_name}/"


def _delay(args: argparse.Namespace) -> float:
    if args.wait_delay is not None:
        delay: float = args.wait_delay
        return delay
    return 1.0 if args.target == "local" else 30.0


def _deployment_config(args: argparse.Namespace) -> dict[str, object] | None:
    """The DeploymentConfig the guarded-update flags describe, or None for a plain update."""
    given = (args.traffic, args.canary_size, args.linear_step_size, args.bake,
             args.termination_wait, args.max_execution_timeout)
    if all(v is None for v in given) and not args.rollback_alarm:
        return None
    return deployment_config(
        args.traffic or "all-at-once", args.bake or 0, args.canary_size, args.linear_step_size,
        args.termination_wait, args.max_execution_timeout, args.rollback_alarm)


_COMPONENT_FLAGS = ("copies", "cpus", "memory_mb", "max_memory_mb", "accelerators",
                    "min_instances", "max_instances", "routing")


def _component_spec(args: argparse.Namespace) -> ComponentSpec | None:
    """The inference component the flags describe, or None for a multi-model endpoint."""
    if args.inference_component is None:
        given = [f"--{flag.replace('_', '-')}" for flag in _COMPONENT_FLAGS
                 if getattr(args, flag) is not None]
        if given:
            raise BadInput(f"{', '.join(given)} describe an inference component: add "
                           "--inference-component NAME (or leave them out)")
        return None
    chosen = {flag: getattr(args, flag) for flag in _COMPONENT_FLAGS
              if getattr(args, flag) is not None}
    return ComponentSpec(name=args.inference_component, **chosen)


def check_flags(args: argparse.Namespace) -> None:
    """BadInput with every flag to fix, before any call: a refusal leaves nothing behind."""
    problems = []
    if args.inference_component is None:
        problems += check_guarded(vars(args), args.instance_count)
        if args.instance_count < 1:
            problems.append(f"--instance-count is 1 or more, not {args.instance_count}")
    problems += check_container(args.role_arn, args.image_uri, args.env, args.payload)
    type_problem = check_instance_type(args.instance_type)
    if type_problem:
        problems.append(type_problem)
    if problems:
        raise BadInput("; ".join(problems))


def _base_command(args: argparse.Namespace, command: str = "deploy") -> str:
    """``mme <command>`` with the flags that name this endpoint on this target."""
    parts = ["mme", command, "--target", args.target, "--endpoint-name", args.endpoint_name]
    for flag in ("emulator_url", "region", "profile"):
        if getattr(args, flag, None):
            parts += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    return " ".join(shlex.quote(p) for p in parts)


def interrupted_lines(args: argparse.Namespace, exc: Interrupted) -> list[str]:
    """What Ctrl-C left: the sentence, the command that follows it, the one that stops it."""
    base = _base_command(args)
    component = getattr(args, "inference_component", None)
    named = f" --inference-component {shlex.quote(component)}" if component else ""
    lines = [f"interrupted: {exc}"]
    if exc.kind in ("nothing", "done"):
        return lines
    lines.append(f"  follow it:    {base}{named} --follow")
    teardown = _base_command(args, "teardown")
    if exc.kind == "guarded" and exc.alarms:
        target = f"--target {args.target}" + (
            f" --emulator-url {shlex.quote(args.emulator_url)}" if args.emulator_url else "")
        lines.append(f"  roll it back: mme alarm set-state {target} --name "
                     f"{shlex.quote(exc.alarms[0])} --state ALARM   (its rollback alarm)")
    elif exc.kind in ("guarded", "update", "component-update"):
        lines.append("  to undo it:   an update without a rollback alarm cannot be stopped "
                     "(SageMaker has no call for it); once it is done, deploy the previous "
                     "version again")
    elif exc.kind == "component-create":
        lines.append(f"  remove it:    {teardown}{named}")
    else:  # create, endpoint-create
        lines.append(f"  remove it:    {teardown}")
    return lines


def run_follow(args: argparse.Namespace) -> int:
    """``mme deploy --follow``: follow the endpoint (or component) until it is done."""
    from harness.component_deployer import wait_for_component

    def work() -> None:
        if args.artifacts:
            raise BadInput("--follow deploys nothing: leave out the artifacts")
        store_dir, prefix = _store(args)
        config = DeployConfig(endpoint_name=args.endpoint_name, artifacts=[],
                              bucket=args.bucket, prefix=prefix, store_dir=store_dir,
                              wait_delay_s=_delay(args))
        deployer = _deployer(args)
        if args.inference_component:
            described = wait_for_component(deployer, args.inference_component,
                                           config.wait_delay_s, config.wait_max_attempts * 10)
            print(f"inference component {args.inference_component}: "
                  f"{described['InferenceComponentStatus']}")
            return
        described = deployer.follow_existing(config)
        print(f"endpoint {args.endpoint_name}: {described['EndpointStatus']} on "
              f"{described.get('EndpointConfigName')}")

    return _run(work, args)


def run_deploy(args: argparse.Namespace) -> int:
    if args.follow:
        return run_follow(args)
    if not args.artifacts:
        print("error: give the model repositories, model folders or tarballs to deploy (or "
              "--follow to follow what the endpoint is doing)", file=sys.stderr)
        return EXIT_BAD_INPUT

    def work() -> None:
        component = _component_spec(args)
        check_flags(args)
        store_dir, prefix = _store(args)
        guarded = _deployment_config(args)
        config = DeployConfig(
            endpoint_name=args.endpoint_name,
            artifacts=args.artifacts,
            bucket=args.bucket,
            prefix=prefix,
            store_dir=store_dir,
            instance_type=args.instance_type,
            instance_count=args.instance_count,
            image_uri=args.image_uri,
            triton_version=args.triton_version,
            role_arn=args.role_arn,
            environment=dict(args.env),
            model_cache=args.model_cache == "enabled",
            smoke=not args.no_smoke,
            payloads={k: Path(v) for k, v in args.payload},
            wait_delay_s=_delay(args),
            create_bucket=args.create_bucket or args.target == "local",
            dry_run=args.dry_run,
            deployment_config=guarded,
            component=component,
        )
        if component is not None:  # its flags are checked before the emulator is asked
            check_component(component, config)
        result = _deployer(args).deploy(config)
        if component is not None:
            print(f"inference component {component.name} on endpoint {result.endpoint_name}: "
                  f"{result.action}; model {result.model_name}; ModelDataUrl "
                  f"{result.model_data_url}")
            return
        targets = ", ".join(a.target_model for a in result.artifacts)
        print(
            f"endpoint {result.endpoint_name}: {result.action}; ModelDataUrl "
            f"{result.model_data_url}; TargetModels: {targets}"
        )

    return _run(work, args)


def run_teardown(args: argparse.Namespace) -> int:
    def work() -> None:
        store_dir, prefix = _store(args)
        _deployer(args).teardown(
            args.endpoint_name,
            bucket=args.bucket,
            prefix=prefix if store_dir is not None else (args.prefix or ""),
            artifacts=args.artifact,
            dry_run=args.dry_run,
            wait_delay_s=_delay(args),
            store_dir=store_dir,
            inference_component=args.inference_component,
        )

    return _run(work)


def _run(work: Callable[[], None], args: argparse.Namespace | None = None) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        work()
    except Interrupted as exc:
        for line in (interrupted_lines(args, exc) if args is not None
                     else [f"interrupted: {exc}"]):
            print(line, file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("interrupted: nothing was asked of the endpoint yet" if args is not None else
              "interrupted: the teardown stopped where it was; run it again to finish",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except RolledBack as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ROLLED_BACK
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ClientError as exc:
        error = exc.response.get("Error", {})
        print(
            f"error: {exc.operation_name} failed: {error.get('Code')}: {error.get('Message')}",
            file=sys.stderr,
        )
        return 1
    except BotoCoreError as exc:  # no credentials, unreachable endpoint, ...
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mme")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
