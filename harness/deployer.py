"""The shared boto3 deployer: the same code deploys to the emulator and to real SageMaker.

Given Triton model repositories or tarballs, it packages them (one ``<name>.tar.gz`` per
repository, model folders at the archive root), uploads them under an S3 prefix, creates the
model (``Mode: MultiModel``, ``ModelDataUrl`` = the prefix), an endpoint config and the endpoint,
waits for ``InService``, and smoke-invokes every ``TargetModel`` through sagemaker-runtime.

Only endpoint URLs and credentials differ between targets (see ``make_clients``). This module
never imports ``emulator``: what it does works against any SageMaker API. One exception, for the
emulator only: with ``store_dir`` the tarballs are copied into a local folder instead of a bucket
and ``ModelDataUrl`` is that folder's ``file://`` URL (the emulator reads folders; SageMaker
does not), so ``mme deploy --target local`` needs no S3 server.

Re-runs are idempotent: the model and endpoint-config names carry a digest of their definition
(image, environment, instance type, the artifacts' digests ...), so an unchanged deployment
reuses everything, and a changed one gets a new model and config and an ``UpdateEndpoint``.
Changed artifacts count as a change because a running MME may keep serving cached copies.

A guarded update (``DeployConfig.deployment_config``: SageMaker's ``DeploymentConfig``, e.g. a
canary with a bake time and rollback alarms, built by ``deployment_config``) is passed to
UpdateEndpoint as is; the deployer then follows DescribeEndpoint and reports each step (the new
fleet starting, each traffic step and its bake, a rollback), on the emulator and on SageMaker
alike, and raises ``RolledBack`` when SageMaker (or the emulator) rolled the update back.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from botocore import xform_name  # boto3's own operation -> method name

from ensembles.packaging import package
from harness.deployment import (
    DEFAULT_TRITON_VERSION,
    Artifact,
    BadInput,
    DeployConfig,
    DeployError,
    DeployResult,
    Interrupted,
    RolledBack,
    SmokeResult,
    auto_payload,
    definition_digest,
    resource_name,
)
from harness.model_store import (
    file_digest,
    is_model_dir,
    is_repository,
    is_tarball,
    tarball_name,
)
from harness.model_versions import ModelStore, resource_base, version_name

# Account of the SageMaker Triton image per region (sagemaker-python-sdk,
# image_uri_config/sagemaker-tritonserver.json; the same map for versions 23.12 to 24.09).
TRITON_VERSIONS = ("23.12", "24.01", "24.03", "24.05", "24.09")
TRITON_REGISTRIES = {
    "af-south-1": "626614931356",
    "il-central-1": "780543022126",
    "ap-east-1": "871362719292",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-north-1": "763104351884",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "eu-south-1": "692866216735",
    "me-south-1": "217643126080",
    "sa-east-1": "763104351884",
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
}
LOCAL_ROLE_ARN = "arn:aws:iam::123456789012:role/mme-emulator"
DEFAULT_EMULATOR_URL = "http://127.0.0.1:8080"  # where ``mme serve`` listens by default
# --target local without a bucket: the folder that stands for one (the emulator reads folders)
DEFAULT_STORE_DIR = Path("~/.cache/sagemaker-mme-emulator-models")
_NAME_OK = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


def capacity_size(text: str) -> dict[str, Any]:
    """``10%`` -> CAPACITY_PERCENT 10; ``2`` -> INSTANCE_COUNT 2 (SageMaker's CapacitySize)."""
    value = text.strip()
    percent = value.endswith("%")
    number = value[:-1] if percent else value
    if not number.isdigit() or int(number) < 1:
        raise DeployError(f"a size is a whole number of instances (2) or a percentage (10%), "
                          f"not {text!r}")
    return {"Type": "CAPACITY_PERCENT" if percent else "INSTANCE_COUNT", "Value": int(number)}


def deployment_config(
    traffic: str = "ALL_AT_ONCE",
    wait_interval_s: int = 0,
    canary_size: str | None = None,
    linear_step_size: str | None = None,
    termination_wait_s: int | None = None,
    max_execution_timeout_s: int | None = None,
    rollback_alarms: Sequence[str] = (),
) -> dict[str, Any]:
    """SageMaker's ``DeploymentConfig`` for a blue/green update (all at once, canary, linear)
    with its bake time (WaitIntervalInSeconds) and the alarms that roll it back."""
    traffic = traffic.upper().replace("-", "_")
    routing: dict[str, Any] = {"Type": traffic, "WaitIntervalInSeconds": int(wait_interval_s)}
    if traffic == "CANARY":
        if canary_size is None:
            raise DeployError("a canary needs its size (--canary-size 10% or 1)")
        routing["CanarySize"] = capacity_size(canary_size)
    elif traffic == "LINEAR":
        if linear_step_size is None:
            raise DeployError("linear traffic shifting needs its step (--linear-step-size 20%)")
        routing["LinearStepSize"] = capacity_size(linear_step_size)
    elif traffic != "ALL_AT_ONCE":
        raise DeployError(f"traffic routing is all-at-once, canary or linear, not {traffic!r}")
    policy: dict[str, Any] = {"TrafficRoutingConfiguration": routing}
    if termination_wait_s is not None:
        policy["TerminationWaitInSeconds"] = int(termination_wait_s)
    if max_execution_timeout_s is not None:
        policy["MaximumExecutionTimeoutInSeconds"] = int(max_execution_timeout_s)
    config: dict[str, Any] = {"BlueGreenUpdatePolicy": policy}
    if rollback_alarms:
        config["AutoRollbackConfiguration"] = {
            "Alarms": [{"AlarmName": name} for name in rollback_alarms]}
    return config


def triton_image_uri(region: str, version: str = DEFAULT_TRITON_VERSION) -> str:
    """The SageMaker Triton image for ``region``, e.g. ``763104351884.dkr.ecr...:24.09-py3``."""
    if version not in TRITON_VERSIONS:
        raise DeployError(
            f"unknown SageMaker Triton version {version!r}; known: {', '.join(TRITON_VERSIONS)} "
            "(or pass --image-uri)"
        )
    account = TRITON_REGISTRIES.get(region)
    if account is None:
        raise DeployError(f"no SageMaker Triton image is known for region {region!r}")
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/sagemaker-tritonserver:{version}-py3"


# ---------------------------------------------------------------------------------------------
# Clients


@dataclass
class Clients:
    sagemaker: Any
    runtime: Any
    s3: Any
    region: str
    target: str  # local | aws
    cloudwatch: Any = None  # the rollback alarms' (checked before a guarded update)
    autoscaling: Any = None  # Application Auto Scaling: what a teardown deregisters


def make_clients(
    session: Any,
    target: str,
    emulator_url: str | None = None,
    s3_endpoint_url: str | None = None,
) -> Clients:
    """boto3 clients for ``target``: ``aws`` uses the session as is; ``local`` points the
    SageMaker APIs at the emulator and S3 at an S3-compatible server."""
    from botocore.config import Config

    region = session.region_name or ("us-east-1" if target == "local" else None)
    if region is None:
        raise DeployError("no AWS region: pass --region or set AWS_DEFAULT_REGION")
    kwargs: dict[str, Any] = {"region_name": region}
    if target == "local":
        if not emulator_url:
            raise DeployError("--target local needs the emulator's URL (--emulator-url)")
        if session.get_credentials() is None:
            # The emulator and most local S3 servers ignore signatures, but boto3 must sign.
            kwargs.update(aws_access_key_id="local", aws_secret_access_key="local")
    elif target != "aws":
        raise DeployError(f"unknown target {target!r}: local or aws")
    sm_url = emulator_url if target == "local" else None
    runtime_config = Config(read_timeout=120, retries={"max_attempts": 1, "mode": "standard"})
    return Clients(
        sagemaker=session.client("sagemaker", endpoint_url=sm_url, **kwargs),
        runtime=session.client(
            "sagemaker-runtime", endpoint_url=sm_url, config=runtime_config, **kwargs
        ),
        s3=session.client("s3", endpoint_url=s3_endpoint_url, **kwargs),
        region=region,
        target=target,
        cloudwatch=session.client("cloudwatch", endpoint_url=sm_url, **kwargs),
        autoscaling=session.client("application-autoscaling", endpoint_url=sm_url, **kwargs),
    )


# ---------------------------------------------------------------------------------------------
# What to deploy


# ---------------------------------------------------------------------------------------------
# The deployer


class Deployer:
    def __init__(self, clients: Clients, out: TextIO | None = None, progress: bool = True):
        self.clients = clients
        self.out = out or sys.stdout
        self.progress = progress
        self._dry_run = False
        self._asked: str | None = None  # the change asked of the endpoint by this run

    # -- the calls, printed -------------------------------------------------------------------

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _mutate(self, client: Any, operation: str, **params: Any) -> dict[str, Any]:
        """A call that changes something: printed, and skipped in a dry run."""
        service = client.meta.service_model.service_name
        shown = json.dumps(params, default=str, sort_keys=True)
        self._say(f"{'would call' if self._dry_run else 'call'} {service}.{operation} {shown}")
        if self._dry_run:
            return {}
        response: dict[str, Any] = getattr(client, xform_name(operation))(**params)
        return response

    def _ask(self, operation: str, took: Callable[[], bool], **params: Any) -> bool:
        """A change asked of SageMaker: True once answered, False when a Ctrl-C cut the call
        short after SageMaker took the change (the caller says what goes on in the endpoint).
        A Ctrl-C while the call is in flight leaves its outcome unknown (the service may have
        taken the change before its answer came back), so ``took``, a read, tells; where the
        change was not taken, or the read fails, the KeyboardInterrupt goes on (nothing was
        asked: what this run made is undone)."""
        try:
            self._mutate(self.clients.sagemaker, operation, **params)
        except KeyboardInterrupt:
            try:
                taken = not self._dry_run and took()
            except Exception:  # noqa: BLE001 - no answer: as if not taken, the Ctrl-C goes on
                taken = False
            if not taken:
                raise
            return False
        return True

    def _read(self, client: Any, operation: str, **params: Any) -> dict[str, Any]:
        """A read: made even in a dry run, so the plan reflects what exists."""
        response: dict[str, Any] = getattr(client, xform_name(operation))(**params)
        return response

    # -- packaging and upload -----------------------------------------------------------------

    def package(self, artifacts: Sequence[Path], work_dir: Path,
                config: DeployConfig | None = None) -> list[Artifact]:
        """Tarballs as they are; repositories (or single model folders) packaged. Each is
        checked first with `mme lint`'s rules (``harness.lint``; the instance type and Triton
        release of ``config``), so a deployment that cannot load stops before anything is
        uploaded or created; warnings are said."""
        from emulator.triton.releases import UnknownImage, release_of
        from harness.lint import Unreadable, lint_source
        from harness.lint.source import read

        try:
            release = release_of(config.image_uri if config else None)
        except UnknownImage:  # an image of the user's own: its release is the configured one
            release = release_of(config.triton_version if config else None)
        packaged: list[Artifact] = []
        for item in (Path(a) for a in artifacts):
            if is_tarball(item) or is_repository(item) or is_model_dir(item):
                try:
                    found = lint_source(read(item, str(item) if item.is_dir() else item.name),
                                        release, config.instance_type if config else None)
                except Unreadable as exc:
                    raise DeployError(f"{exc} (nothing was uploaded)") from None
                for finding in found:
                    if finding.level != "error":
                        self._say(f"mme lint {finding.rule.id} {finding.rule.name}: "
                                  f"{finding.message}")
                errors = [f for f in found if f.level == "error"]
                if errors:
                    said = "; ".join(f"{f.rule.id} {f.message}" for f in errors)
                    raise DeployError(f"{said} (`mme lint {item}` says more; nothing was "
                                      "uploaded)")
            if is_tarball(item):
                path = item
            elif is_repository(item):
                path = package(item, work_dir / tarball_name(item), layout="flat")
            elif is_model_dir(item):
                # A lone model folder: a tarball with that one folder at its root.
                path = package(item, work_dir / tarball_name(item), layout="folder")
            else:
                raise DeployError(
                    f"{item} is neither a .tar.gz nor a Triton model repository "
                    "(a folder of <model>/config.pbtxt)"
                )
            packaged.append(Artifact(path, path.name, file_digest(path), path.stat().st_size))
        names = [a.target_model for a in packaged]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise DeployError(f"two artifacts would upload as the same TargetModel: {duplicates}")
        return packaged

    def ensure_bucket(self, bucket: str, create: bool) -> None:
        from botocore.exceptions import ClientError

        try:
            self._read(self.clients.s3, "HeadBucket", Bucket=bucket)
            return
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in ("404", "NoSuchBucket", "NotFound"):
                raise DeployError(f"cannot use bucket {bucket!r}: {exc}") from exc
        if not create:
            raise DeployError(f"bucket {bucket!r} does not exist (create it, or --create-bucket)")
        params: dict[str, Any] = {"Bucket": bucket}
        if self.clients.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": self.clients.region}
        self._mutate(self.clients.s3, "CreateBucket", **params)

    def upload(self, artifacts: Sequence[Artifact], bucket: str, prefix: str) -> int:
        """Upload what changed; an object whose recorded digest matches is left alone.
        Returns how many were uploaded."""
        from botocore.exceptions import ClientError

        written = 0
        for artifact in artifacts:
            key = prefix + artifact.target_model
            try:
                head = self._read(self.clients.s3, "HeadObject", Bucket=bucket, Key=key)
                if head.get("Metadata", {}).get("sha256") == artifact.digest:
                    self._say(f"unchanged s3://{bucket}/{key}")
                    continue
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in (
                    "404",
                    "NoSuchKey",
                    "NoSuchBucket",
                ):
                    raise DeployError(f"cannot read s3://{bucket}/{key}: {exc}") from exc
            self._say(
                f"{'would call' if self._dry_run else 'call'} s3.PutObject "
                f'{{"Bucket": "{bucket}", "Key": "{key}"}} ({artifact.size} bytes)'
            )
            if self._dry_run:
                continue
            with _progress_bar(artifact.size, key, self.progress) as callback:
                self.clients.s3.upload_file(
                    str(artifact.path),
                    bucket,
                    key,
                    ExtraArgs={"Metadata": {"sha256": artifact.digest}},
                    Callback=callback,
                )
            written += 1
        return written

    def _store_folder(self, config: DeployConfig) -> Path | None:
        """The local folder the tarballs go to, or None for S3 (``config.bucket``)."""
        if config.store_dir is None:
            if not config.bucket:
                raise DeployError("no model store: give --bucket (S3)"
                                  + (" or, for the emulator, a local --store-dir"
                                     if self.clients.target == "local" else ""))
            return None
        if self.clients.target != "local":
            raise DeployError("a local --store-dir is a ModelDataUrl only the emulator reads; "
                              "SageMaker needs --bucket")
        if config.bucket:
            raise DeployError("give --bucket (S3) or --store-dir (a local folder), not both")
        return (config.store_dir.expanduser().resolve() / config.normalized_prefix()).resolve()

    def copy_to_folder(self, artifacts: Sequence[Artifact], folder: Path) -> int:
        """The local twin of ``upload``: each tarball copied whole (a temporary name renamed into
        place, so the emulator never reads half of one); an equal one is left alone. Returns how
        many were copied."""
        written = 0
        for artifact in artifacts:
            destination = folder / artifact.target_model
            if destination.is_file() and file_digest(destination) == artifact.digest:
                self._say(f"unchanged {destination}")
                continue
            self._say(f"{'would copy' if self._dry_run else 'copy'} {artifact.target_model} to "
                      f"{destination} ({artifact.size} bytes)")
            if self._dry_run:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            partial = destination.with_name(f".{destination.name}.partial")
            shutil.copyfile(artifact.path, partial)
            partial.replace(destination)
            written += 1
        return written

    def model_store(self, config: DeployConfig) -> ModelStore:
        """Where this deployment's versions go: a local folder or a bucket and prefix."""
        folder = self._store_folder(config)
        if folder is not None:
            return ModelStore(folder=folder)
        return ModelStore(bucket=config.bucket, prefix=config.normalized_prefix())

    def put_version(self, config: DeployConfig, store: ModelStore, version: str,
                    artifacts: Sequence[Artifact]) -> bool:
        """The tarballs into the version's own folder (prefix); True when this call wrote any
        (the version is then this run's to delete again if nothing comes to use it)."""
        if store.folder is not None:
            return self.copy_to_folder(artifacts, store.folder / version) > 0
        assert store.bucket is not None
        self.ensure_bucket(store.bucket, config.create_bucket)
        return self.upload(artifacts, store.bucket, store.key(version)) > 0

    def delete_version(self, store: ModelStore, version: str) -> None:
        """One version's tarballs, and the folder that held them once empty."""
        if store.folder is not None:
            folder = store.folder / version
            if not folder.is_dir():
                return
            self._say(f"{'would delete' if self._dry_run else 'delete'} {folder}")
            if self._dry_run:
                return
            shutil.rmtree(folder, ignore_errors=True)
            if store.folder.is_dir() and not any(store.folder.iterdir()):
                store.folder.rmdir()
            return
        assert store.bucket is not None
        self._delete_objects(store.bucket, store.key(version).rstrip("/"), ())

    # -- deploy -------------------------------------------------------------------------------

    def deploy(self, config: DeployConfig) -> DeployResult:
        self._dry_run = config.dry_run
        _check_name(config.endpoint_name)
        if config.component is not None:
            from harness.component_deployer import deploy_component

            return deploy_component(self, config, config.component)
        image, role = self.image_and_role(config)
        store = self.model_store(config)
        if config.deployment_config:
            self.check_guarded_update(config)
        with tempfile.TemporaryDirectory(prefix="mme-deploy-") as tmp:
            artifacts = self.package(config.artifacts, Path(tmp), config)
            # Each version under its own prefix: a config's bytes are never overwritten.
            version = version_name(config.endpoint_name,
                                   ((a.target_model, a.digest) for a in artifacts))
            model_data_url = store.url(version)
            written = self.put_version(config, store, version, artifacts)
            container: dict[str, Any] = {
                "Image": image,
                "Mode": "MultiModel",
                "ModelDataUrl": model_data_url,
                "Environment": dict(config.environment),
                "MultiModelConfig": {
                    "ModelCacheSetting": "Enabled" if config.model_cache else "Disabled"
                },
            }
            variant = {
                "VariantName": config.variant_name,
                "InstanceType": config.instance_type,
                "InitialInstanceCount": config.instance_count,
                "InitialVariantWeight": 1.0,
            }
            digest = definition_digest(
                {
                    "container": container,
                    "role": role,
                    "variant": variant,
                    "artifacts": sorted((a.target_model, a.digest) for a in artifacts),
                }
            )
            model_name = config_name = resource_name(config.endpoint_name, digest)
            self._asked = None
            try:
                self._create_once("Model", model_name, PrimaryContainer=container,
                                  ExecutionRoleArn=role)
                self._create_once("EndpointConfig", config_name,
                                  ProductionVariants=[{**variant, "ModelName": model_name}])
                action = self._ensure_endpoint(config, config_name)
            except KeyboardInterrupt:
                raise self._interrupted(config, config_name, store,
                                        [version] if written else []) from None
            except Exception:
                # A refused call or a rolled-back update: what no config of the endpoint uses
                # goes again (never while the endpoint is still changing).
                if not config.dry_run:
                    self.forget_unused(config.endpoint_name, store,
                                       [version] if written else [])
                raise
            result = DeployResult(
                config.endpoint_name,
                model_name,
                config_name,
                model_data_url,
                artifacts,
                "dry-run" if config.dry_run else action,
            )
            if config.dry_run:
                return result
            self.forget_unused(config.endpoint_name, store)
            if config.smoke:
                try:
                    result.smoke = self.smoke(config, artifacts)
                except KeyboardInterrupt:
                    raise Interrupted(f"endpoint {config.endpoint_name} is InService on "
                                      f"{config_name}; the smoke invocations were stopped",
                                      "done") from None
                failed = [s for s in result.smoke if not s.ok]
                if failed:
                    details = "; ".join(f"{s.target_model}: {s.detail}" for s in failed)
                    raise DeployError(
                        f"smoke invocation failed for {len(failed)} model(s): {details}"
                    )
        return result

    def _interrupted(self, config: DeployConfig, config_name: str, store: ModelStore,
                     written: Sequence[str]) -> Interrupted:
        """What a Ctrl-C leaves: a change asked of the endpoint goes on there (SageMaker runs
        it, not this command); before one, what this run made and nothing uses is deleted."""
        name = config.endpoint_name
        if self._asked is None:
            self.forget_unused(name, store, written)
            return Interrupted(f"endpoint {name} was not changed; nothing this run made is "
                               "left", "nothing")
        alarms = [a["AlarmName"] for a in (config.deployment_config or {}).get(
            "AutoRollbackConfiguration", {}).get("Alarms", [])]
        doing = {"create": "creation", "update": "update", "guarded": "guarded update"}
        return Interrupted(f"stopped following; the {doing[self._asked]} of endpoint {name} "
                           f"to {config_name} continues in the endpoint", self._asked, alarms)

    def check_guarded_update(self, config: DeployConfig) -> None:
        """Before anything is packaged or created: a guarded update needs an endpoint to update
        (CreateEndpoint takes no DeploymentConfig) and rollback alarms that exist."""
        name = config.endpoint_name
        if self._exists("DescribeEndpoint", EndpointName=name) is None:
            raise BadInput(f"endpoint {name} does not exist yet: a guarded update (--traffic) "
                           "shifts traffic from its running fleet to the new one, and "
                           "CreateEndpoint takes no DeploymentConfig; deploy it without "
                           "--traffic first, then the next version with it")
        alarms = [a["AlarmName"] for a in (config.deployment_config or {}).get(
            "AutoRollbackConfiguration", {}).get("Alarms", [])]
        if alarms and self.clients.cloudwatch is not None:
            found = self._read(self.clients.cloudwatch, "DescribeAlarms", AlarmNames=alarms)
            known = {a["AlarmName"] for a in found.get("MetricAlarms", [])
                     + found.get("CompositeAlarms", [])}
            missing = [a for a in alarms if a not in known]
            if missing:
                raise BadInput(
                    f"rollback alarm(s) {', '.join(missing)} do not exist: create them first "
                    f"(mme alarm put --target {self.clients.target} --name {missing[0]} "
                    f"--endpoint-name {name} --metric Invocation5XXErrors --threshold 0)")

    def image_and_role(self, config: DeployConfig) -> tuple[str, str]:
        """The container image and the execution role of a deployment (a made-up role locally)."""
        image = config.image_uri or triton_image_uri(self.clients.region, config.triton_version)
        role = config.role_arn
        if role is None:
            if self.clients.target == "aws":
                raise DeployError("--role-arn is required for --target aws (SageMaker's role)")
            role = LOCAL_ROLE_ARN
        return image, role

    def _exists(self, operation: str, **params: Any) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            return self._read(self.clients.sagemaker, operation, **params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") == "ValidationException" and "Could not find" in error.get(
                "Message", ""
            ):
                return None
            raise

    def _create_once(self, kind: str, name: str, **params: Any) -> bool:
        """Create{kind} of ``name`` with ``params``, unless Describe{kind} finds it (then it is
        said unchanged): True where it was created."""
        key = {f"{kind}Name": name}
        if self._exists(f"Describe{kind}", **key) is not None:
            label = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", kind).lower()  # EndpointConfig
            self._say(f"unchanged {label} {name}")
            return False
        self._mutate(self.clients.sagemaker, f"Create{kind}", **key, **params)
        return True

    def _ask_create_endpoint(self, name: str, config_name: str) -> bool:
        """CreateEndpoint of ``name`` with ``config_name``: False where a Ctrl-C came after
        SageMaker took it (DescribeEndpoint finds the endpoint), so its creation goes on."""
        return self._ask("CreateEndpoint", lambda: self._exists(
            "DescribeEndpoint", EndpointName=name) is not None,
            EndpointName=name, EndpointConfigName=config_name)

    def _settled_endpoint(self, config: DeployConfig, name: str) -> dict[str, Any] | None:
        """Endpoint ``name`` as DescribeEndpoint shows it (None: there is none), once it is no
        longer Creating or Updating (a dry run only says it would wait)."""
        current = self._exists("DescribeEndpoint", EndpointName=name)
        if current is not None and current["EndpointStatus"] in ("Creating", "Updating"):
            if config.dry_run:
                self._say(f"endpoint {name} is {current['EndpointStatus']}; would wait for it")
            else:
                current = self._wait(config, name, quiet=True)
        return current

    def _ensure_endpoint(self, config: DeployConfig, config_name: str) -> str:
        name = config.endpoint_name
        current = self._settled_endpoint(config, name)
        action = "created"
        if current is not None and current["EndpointStatus"] == "Failed":
            self._say(f"endpoint {name} is Failed ({current.get('FailureReason')}): recreating it")
            self._mutate(self.clients.sagemaker, "DeleteEndpoint", EndpointName=name)
            if not config.dry_run:
                self._wait_deleted(config, name)
            current, action = None, "recreated"
        if current is None:
            answered = self._ask_create_endpoint(name, config_name)
            self._asked = "create"
            if not answered:  # a Ctrl-C after SageMaker took it: the creation goes on
                raise KeyboardInterrupt
        elif current.get("EndpointConfigName") == config_name:
            self._say(f"unchanged endpoint {name} (config {config_name})")
            return "unchanged"
        else:
            guarded = ({"DeploymentConfig": dict(config.deployment_config)}
                       if config.deployment_config else {})
            def took() -> bool:
                now = self._read(self.clients.sagemaker, "DescribeEndpoint", EndpointName=name)
                return (now["EndpointStatus"] == "Updating"
                        or now.get("EndpointConfigName") == config_name)

            answered = self._ask("UpdateEndpoint", took, EndpointName=name,
                                 EndpointConfigName=config_name, **guarded)
            self._asked = "guarded" if guarded else "update"
            if not answered:  # a Ctrl-C after SageMaker took it: the update goes on
                raise KeyboardInterrupt
            action = "updated"
        if config.dry_run:
            self._say(f"would wait for endpoint {name} to be InService")
            return action
        if action == "updated" and config.deployment_config:
            described = self.follow(config, name)
        else:
            described = self._wait(config, name)
        if described.get("EndpointConfigName") != config_name:
            # SageMaker rolls a failed update back and keeps serving the old config.
            raise RolledBack(
                f"update of endpoint {name} failed and was rolled back: "
                f"{described.get('FailureReason', 'no reason given')}"
            )
        return action

    def follow_existing(self, config: DeployConfig) -> dict[str, Any]:
        """``mme deploy --follow``: what the endpoint is doing, followed until it is steady, as
        a deployment follows its own; RolledBack when its update was rolled back. Then the
        clean-up a finished deployment does (configs, models, versions no config uses)."""
        self._dry_run = False
        name = config.endpoint_name
        if self._exists("DescribeEndpoint", EndpointName=name) is None:
            raise DeployError(f"endpoint {name} does not exist here: check --endpoint-name and "
                              "--target (--emulator-url)")
        described = self.follow(config, name)
        if config.store_dir is not None or config.bucket:
            self.forget_unused(name, self.model_store(config))
        if described.get("FailureReason"):
            raise RolledBack(f"the last update of endpoint {name} was rolled back: "
                             f"{described['FailureReason']}")
        return described

    def follow(self, config: DeployConfig, name: str) -> dict[str, Any]:
        """Poll DescribeEndpoint until the update ends, saying each step as it changes: the new
        fleet starting, each traffic step and its bake, a rollback. The same on both targets:
        only what DescribeEndpoint returns is read."""
        said = None
        for _ in range(max(1, config.wait_max_attempts * 10)):
            described = self._read(self.clients.sagemaker, "DescribeEndpoint", EndpointName=name)
            status = described["EndpointStatus"]
            step = _deployment_step(described)
            if step != said:
                self._say(f"deployment of {name}: {step}")
                said = step
            if status not in ("Updating", "RollingBack", "SystemUpdating"):
                if status != "InService":
                    raise RolledBack(f"endpoint {name} is {status} after the update: "
                                     f"{described.get('FailureReason', 'no reason given')}")
                return described
            time.sleep(config.wait_delay_s)
        raise DeployError(f"endpoint {name} was still updating after "
                          f"{config.wait_max_attempts * 10} polls; look at DescribeEndpoint")

    def _wait(self, config: DeployConfig, name: str, quiet: bool = False) -> dict[str, Any]:
        from botocore.exceptions import WaiterError

        if not quiet:
            self._say(f"waiting for endpoint {name} to be InService")
        try:
            self.clients.sagemaker.get_waiter("endpoint_in_service").wait(
                EndpointName=name,
                WaiterConfig={
                    "Delay": config.wait_delay_s,
                    "MaxAttempts": config.wait_max_attempts,
                },
            )
        except WaiterError as exc:
            described = self._exists("DescribeEndpoint", EndpointName=name) or {}
            status = described.get("EndpointStatus", "gone")
            reason = described.get("FailureReason") or str(exc)
            raise DeployError(
                f"endpoint {name} did not become InService ({status}): {reason}"
            ) from None
        return self._read(self.clients.sagemaker, "DescribeEndpoint", EndpointName=name)

    def _wait_deleted(self, config: DeployConfig, name: str) -> None:
        self.clients.sagemaker.get_waiter("endpoint_deleted").wait(
            EndpointName=name,
            WaiterConfig={"Delay": config.wait_delay_s, "MaxAttempts": config.wait_max_attempts},
        )

    def forget_unused(self, endpoint_name: str, store: ModelStore,
                      written: Sequence[str] = ()) -> None:
        """Delete the configs and models this deployer made for the endpoint that its config no
        longer uses, then the versions of model data none of the kept models references (and
        ``written``, versions this run put in the store, unless one does). Nothing while the
        endpoint is changing (an update, a rollback): its configs may still be needed."""
        sm = self.clients.sagemaker
        described = self._exists("DescribeEndpoint", EndpointName=endpoint_name)
        status = (described or {}).get("EndpointStatus")
        if described is not None and status not in ("InService", "Failed", "OutOfService"):
            self._say(f"endpoint {endpoint_name} is {status}: unused configs, models and model "
                      "data are kept until it is done (the next deployment deletes them)")
            return
        in_use = (described or {}).get("EndpointConfigName")
        kept_models: set[str] = set()
        for name in self._owned(endpoint_name, "ListEndpointConfigs", "EndpointConfigs"):
            if name == in_use:
                continue
            self._mutate(sm, "DeleteEndpointConfig", EndpointConfigName=name)
        if in_use:
            used = self._exists("DescribeEndpointConfig", EndpointConfigName=in_use) or {}
            kept_models = {v["ModelName"] for v in used.get("ProductionVariants", [])
                           if v.get("ModelName")}
        kept: set[str | None] = set()
        dropped: set[str | None] = {store.version_at(store.url(v), endpoint_name)
                                    for v in written}
        for name in self._owned(endpoint_name, "ListModels", "Models"):
            model = self._exists("DescribeModel", ModelName=name) or {}
            url = (model.get("PrimaryContainer") or {}).get("ModelDataUrl")
            if name in kept_models:
                kept.add(store.version_at(url, endpoint_name))
                continue
            dropped.add(store.version_at(url, endpoint_name))
            self._mutate(sm, "DeleteModel", ModelName=name)
        for version in sorted(v for v in dropped - kept if v is not None):
            self.delete_version(store, version)

    def _owned(self, endpoint_name: str, operation: str, key: str) -> list[str]:
        base = resource_base(endpoint_name)
        owned = re.compile(re.escape(base) + r"-[0-9a-f]{8}")
        field_name = "ModelName" if key == "Models" else "EndpointConfigName"
        paginator = self.clients.sagemaker.get_paginator(xform_name(operation))
        names = []
        for page in paginator.paginate(NameContains=base):
            names += [item[field_name] for item in page[key]]
        return [n for n in names if owned.fullmatch(n)]

    # -- smoke invocations --------------------------------------------------------------------

    def smoke(self, config: DeployConfig, artifacts: Sequence[Artifact]) -> list[SmokeResult]:
        results = []
        for artifact in artifacts:
            target = artifact.target_model
            try:
                if target in config.payloads:
                    body, content_type = (
                        Path(config.payloads[target]).read_bytes(),
                        "application/json",
                    )
                else:
                    body, content_type = auto_payload(artifact.path)
            except (DeployError, OSError) as exc:
                results.append(SmokeResult(target, True, f"skipped: {exc}"))
                self._say(f"smoke {target}: skipped ({exc})")
                continue
            try:
                response = self.clients.runtime.invoke_endpoint(
                    EndpointName=config.endpoint_name,
                    TargetModel=target,
                    ContentType=content_type,
                    Body=body,
                )
                size = len(response["Body"].read())
                results.append(SmokeResult(target, True, f"{size} bytes"))
                self._say(f"smoke {target}: ok ({size} bytes, {response.get('ContentType')})")
            except Exception as exc:  # noqa: BLE001 - every model is tried; failures listed
                results.append(SmokeResult(target, False, str(exc)))
                self._say(f"smoke {target}: FAILED {exc}")
        return results

    # -- teardown -----------------------------------------------------------------------------

    def teardown(
        self,
        endpoint_name: str,
        bucket: str | None = None,
        prefix: str | None = None,
        artifacts: Sequence[str] = (),
        dry_run: bool = False,
        wait_delay_s: float = 30.0,
        store_dir: Path | None = None,
        inference_component: str | None = None,
    ) -> None:
        """Delete the endpoint, then the models and configs this deployer made for it.

        An endpoint for inference components loses its components first (and their models),
        as SageMaker's console does; with ``inference_component`` only that one goes, and the
        endpoint only if no other component is left on it.

        Model data goes with the models that referenced it, and only that: the versions (and
        components' tarballs) the deleted models' ``ModelDataUrl`` name in the store given
        (``bucket`` and ``prefix``, or ``store_dir``/``prefix``); ``artifacts`` narrows it to
        those TargetModels. An endpoint this emulator (account) does not have deletes nothing
        in the store: another server's endpoint of that name may use it.
        """
        from harness.component_deployer import teardown_components

        self._dry_run = dry_run
        component_models, components_left = teardown_components(
            self, endpoint_name, inference_component, wait_delay_s)
        if components_left:
            self._say(f"endpoint {endpoint_name} kept: inference components "
                      f"{', '.join(components_left)} are still on it")
            # The tarball of the one that went is under its own name (component_deployer).
            assert inference_component is not None
            prefix = f"{(prefix or '').strip('/')}/{inference_component}".strip("/")
            if bucket:
                self._delete_objects(bucket, prefix, ())
            if store_dir is not None:
                self._delete_copies(store_dir.expanduser().resolve() / prefix, ())
            return
        urls = self._delete_endpoint(endpoint_name, component_models, wait_delay_s)
        base = (prefix or "").strip("/")
        if bucket:
            self._delete_data(ModelStore(bucket=bucket, prefix=f"{base}/" if base else ""),
                              endpoint_name, urls, artifacts)
        elif store_dir is not None:
            self._delete_data(ModelStore(folder=store_dir.expanduser().resolve() / base),
                              endpoint_name, urls, artifacts)

    def _delete_data(self, store: ModelStore, endpoint_name: str, urls: set[str],
                     artifacts: Sequence[str]) -> None:
        """What the deleted models' URLs name in ``store``: a version of the endpoint's model
        data, or a component's tarball."""
        for url in sorted(urls):
            holder = store.within(url)
            if holder is None:
                continue
            version = holder.version_at(url, endpoint_name)
            if version is not None and not artifacts:
                self.delete_version(holder, version)
            elif holder.folder is not None:
                folder = holder.folder / version if version else holder.folder
                self._delete_copies(folder, list(artifacts) or (
                    [] if version else [url.rsplit("/", 1)[-1]]))
            else:
                assert holder.bucket is not None
                key = holder.key(version).rstrip("/") if version else holder.prefix.rstrip("/")
                self._delete_objects(holder.bucket, key,
                                     list(artifacts) or ([] if version
                                                         else [url.rsplit("/", 1)[-1]]))
        if store.folder is not None and store.folder.is_dir() and not self._dry_run:
            # The folders emptied (a component's, the store's own): empty ones only.
            for emptied in sorted((p for p in store.folder.rglob("*") if p.is_dir()),
                                  reverse=True):
                if not any(emptied.iterdir()):
                    emptied.rmdir()
            if not any(store.folder.iterdir()):
                store.folder.rmdir()

    def _delete_endpoint(self, endpoint_name: str, component_models: set[str],
                         wait_delay_s: float) -> set[str]:
        """The endpoint, then its configs, then their models (and ``component_models``).
        Returns the ModelDataUrls of the models deleted."""
        dry_run = self._dry_run
        described = self._exists("DescribeEndpoint", EndpointName=endpoint_name)
        config_names = set(self._owned(endpoint_name, "ListEndpointConfigs", "EndpointConfigs"))
        if described is not None:
            if described.get("EndpointConfigName"):
                config_names.add(described["EndpointConfigName"])
            from harness.scaling_teardown import delete_scaling

            delete_scaling(self, [f"endpoint/{endpoint_name}/variant/{v['VariantName']}"
                                  for v in described.get("ProductionVariants") or []])
            self._mutate(self.clients.sagemaker, "DeleteEndpoint", EndpointName=endpoint_name)
            if not dry_run:
                self.clients.sagemaker.get_waiter("endpoint_deleted").wait(
                    EndpointName=endpoint_name,
                    WaiterConfig={"Delay": wait_delay_s, "MaxAttempts": 120},
                )
        else:
            self._say(f"endpoint {endpoint_name} does not exist")
        model_names = set(self._owned(endpoint_name, "ListModels", "Models")) | component_models
        for name in sorted(config_names):
            config = self._exists("DescribeEndpointConfig", EndpointConfigName=name)
            if config is None:
                continue
            # A variant for inference components names no model.
            model_names.update(v["ModelName"] for v in config.get("ProductionVariants", [])
                               if v.get("ModelName"))
            self._mutate(self.clients.sagemaker, "DeleteEndpointConfig", EndpointConfigName=name)
        urls: set[str] = set()
        for name in sorted(model_names):
            model = self._exists("DescribeModel", ModelName=name)
            if model is not None:
                for container in [model.get("PrimaryContainer") or {},
                                  *model.get("Containers", [])]:
                    if container.get("ModelDataUrl"):
                        urls.add(container["ModelDataUrl"])
                self._mutate(self.clients.sagemaker, "DeleteModel", ModelName=name)
        return urls

    def _delete_copies(self, folder: Path, artifacts: Sequence[str]) -> None:
        """The local twin of ``_delete_objects``: the tarballs ``copy_to_folder`` put there."""
        if not folder.is_dir():
            return
        # An inference component's tarball sits in a folder of its own name.
        names = list(artifacts) or sorted(str(p.relative_to(folder))
                                          for p in folder.rglob("*.tar.gz"))
        for name in names:
            path = folder / name
            if path.is_file():
                self._say(f"{'would delete' if self._dry_run else 'delete'} {path}")
                if not self._dry_run:
                    path.unlink()
        if self._dry_run:
            return
        for emptied in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
            if not any(emptied.iterdir()):
                emptied.rmdir()
        if not any(folder.iterdir()):
            folder.rmdir()

    def _delete_objects(self, bucket: str, prefix: str, artifacts: Sequence[str]) -> None:
        base = f"{prefix}/" if prefix else ""
        if artifacts:
            keys = [base + a for a in artifacts]
        else:
            paginator = self.clients.s3.get_paginator("list_objects_v2")
            keys = [
                obj["Key"]
                for page in paginator.paginate(Bucket=bucket, Prefix=base)
                for obj in page.get("Contents", [])
            ]
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self._mutate(
                self.clients.s3,
                "DeleteObjects",
                Bucket=bucket,
                Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
            )


# ---------------------------------------------------------------------------------------------
# Helpers


class _progress_bar:  # used as a context manager, reads like a function
    def __init__(self, total: int, desc: str, enabled: bool):
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is in the harness extra; uploads work without it
                return
            self._bar = tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False)

    def __enter__(self) -> Callable[[int], None]:
        bar = self._bar
        return (lambda n: bar.update(n)) if bar is not None else (lambda n: None)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def _deployment_step(described: Mapping[str, Any]) -> str:
    """One line for where an update is, from DescribeEndpoint alone."""
    status = described["EndpointStatus"]
    pending = described.get("PendingDeploymentSummary") or {}
    if status == "InService":
        reason = described.get("FailureReason")
        return (f"InService on {described.get('EndpointConfigName')}"
                + (f" (rolled back: {reason})" if reason else ""))
    if status == "RollingBack":
        return f"RollingBack: {described.get('FailureReason', 'no reason given')}"
    parts = [status]
    for variant in pending.get("ProductionVariants") or []:
        for variant_status in variant.get("VariantStatus") or []:
            text = f"{variant['VariantName']} {variant_status.get('Status')}"
            if variant_status.get("StatusMessage"):
                text += f": {variant_status['StatusMessage']}"
            parts.append(text)
        if "CurrentInstanceCount" in variant:
            parts.append(f"new fleet {variant['CurrentInstanceCount']}/"
                         f"{variant.get('DesiredInstanceCount', '?')} instances, weight "
                         f"{variant.get('CurrentWeight', 0):.2f}")
    return "; ".join(parts)


def _check_name(name: str) -> None:
    if not _NAME_OK.fullmatch(name):
        raise DeployError(
            f"invalid endpoint name {name!r}: up to 63 letters, digits and hyphens, "
            "starting and ending with a letter or digit"
        )
