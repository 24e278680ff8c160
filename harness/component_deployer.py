"""``mme deploy --inference-component``: one model repository deployed as an inference component.

The same boto3 calls on the emulator and on SageMaker, in the order AWS documents for
components: CreateModel (a single-model container whose ``ModelDataUrl`` is the tarball),
CreateEndpointConfig with a variant that names no model (``InstanceType``,
``InitialInstanceCount``, optional ``ManagedInstanceScaling`` and ``RoutingConfig``, the config's
``ExecutionRoleArn``), CreateEndpoint and its ``endpoint_in_service`` waiter, then
CreateInferenceComponent (``Specification`` {``ModelName``, ``ComputeResourceRequirements``},
``RuntimeConfig`` {``CopyCount``}) and DescribeInferenceComponent polled until ``InService``
(botocore has no waiter for components), then one InvokeEndpoint with ``InferenceComponentName``.

An existing endpoint for components is reused as it is (other components may live on it); an
existing component is updated (UpdateInferenceComponent) when its model, resources or copy count
changed, and left alone otherwise. What this run created is deleted again, newest first, when a
later step fails (the component going ``Failed``, a refused call, a failed smoke invocation, an
interrupt), so a failed deployment leaves nothing half made; an update of a component that existed
before is not undone here (SageMaker keeps or rolls back the component itself), and the model it
now runs stays.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.deployment import (
    Artifact,
    BadInput,
    ComponentSpec,
    DeployConfig,
    DeployError,
    DeployResult,
    DeploySteps,
    Interrupted,
    SmokeResult,
    auto_payload,
    definition_digest,
    entry_model,
    resource_name,
)
from harness.model_versions import DIGEST_DIGITS
from harness.scaling_teardown import delete_scaling

# botocore's sagemaker model: InferenceComponentName's pattern and length, the ranges of
# ComputeResourceRequirements and InferenceComponentRuntimeConfig.CopyCount.
_COMPONENT_NAME = re.compile(r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?")
MIN_CPUS = 0.25
MIN_MEMORY_MB = 128
ROUTING_STRATEGIES = ("LEAST_OUTSTANDING_REQUESTS", "RANDOM")
DEFAULT_MODEL_ENV = "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"


def check_component(spec: ComponentSpec, config: DeployConfig) -> None:
    """BadInput naming the flag to fix, before any call: SageMaker's own ranges, and what a
    component deployment cannot take."""
    problems = []
    if len(spec.name) > 63 or not _COMPONENT_NAME.fullmatch(spec.name):
        problems.append(f"invalid inference component name {spec.name!r}: up to 63 letters, "
                        "digits and hyphens, starting and ending with a letter or digit")
    if spec.copies < 0:
        problems.append(f"--copies is 0 or more, not {spec.copies}")
    if spec.cpus < MIN_CPUS:
        problems.append(f"--cpus is at least {MIN_CPUS} (NumberOfCpuCoresRequired), "
                        f"not {spec.cpus}")
    if spec.memory_mb < MIN_MEMORY_MB:
        problems.append(f"--memory-mb is at least {MIN_MEMORY_MB} (MinMemoryRequiredInMb), "
                        f"not {spec.memory_mb}")
    if spec.max_memory_mb is not None and spec.max_memory_mb < spec.memory_mb:
        problems.append(f"--max-memory-mb ({spec.max_memory_mb}) is below --memory-mb "
                        f"({spec.memory_mb})")
    if spec.accelerators is not None and spec.accelerators < 1:
        problems.append(f"--accelerators is 1 or more, not {spec.accelerators}")
    if (spec.min_instances is None) != (spec.max_instances is None):
        problems.append("managed instance scaling needs both --min-instances and "
                        "--max-instances")
    elif (spec.min_instances is not None and spec.max_instances is not None
          and not 0 <= spec.min_instances <= config.instance_count <= spec.max_instances):
        problems.append(f"managed instance scaling needs 0 <= --min-instances "
                        f"({spec.min_instances}) <= --instance-count "
                        f"({config.instance_count}) <= --max-instances "
                        f"({spec.max_instances})")
    if spec.routing is not None and spec.routing not in ROUTING_STRATEGIES:
        problems.append(f"--routing is one of {', '.join(ROUTING_STRATEGIES)}, "
                        f"not {spec.routing!r}")
    if config.instance_count < 1:
        problems.append(f"--instance-count is 1 or more, not {config.instance_count}")
    if len(config.artifacts) != 1:
        problems.append(f"an inference component serves one model repository (or tarball); "
                        f"{len(config.artifacts)} were given: deploy each as its own "
                        "component (another --inference-component name, the same endpoint)")
    if config.deployment_config:
        problems.append("a guarded update (--traffic, --bake, --rollback-alarm ...) is for "
                        "multi-model endpoints; leave those flags out with --inference-component")
    if problems:
        raise BadInput("; ".join(problems))


def _model_base(component: str) -> str:
    """The component's models are ``<component>-ic-<digest>``: told apart from the models of a
    multi-model endpoint of the same name (``<endpoint>-<digest>``)."""
    return f"{component[:51].rstrip('-')}-ic"


class _Created:
    """What this run created, undone newest first when a later step fails."""

    def __init__(self, deployer: DeploySteps) -> None:
        self._deployer = deployer
        self._undo: list[tuple[str, Callable[[], object]]] = []

    def add(self, what: str, undo: Callable[[], object]) -> None:
        self._undo.append((what, undo))

    def keep(self) -> None:
        """What was created is in use by a component that existed before: never undone."""
        self._undo.clear()

    def roll_back(self) -> list[str]:
        """Undo everything; returns what could not be undone (with why)."""
        left = []
        while self._undo:
            what, undo = self._undo.pop()
            self._deployer._say(f"rolling back: delete {what}")
            try:
                undo()
            except Exception as exc:  # noqa: BLE001 - the rest is still undone; the user told
                left.append(f"{what} ({exc})")
        return left


def deploy_component(deployer: DeploySteps, config: DeployConfig,
                     spec: ComponentSpec) -> DeployResult:
    check_component(spec, config)
    image, role = deployer.image_and_role(config)
    prefix = config.normalized_prefix()
    folder = deployer._store_folder(config)
    with tempfile.TemporaryDirectory(prefix="mme-deploy-") as tmp:
        [artifact] = deployer.package(config.artifacts, Path(tmp), config)
        created = _Created(deployer)
        # Under the component's name (two components' tarballs of the same name never clash:
        # component names are unique in an account and region), then the tarball's digest:
        # a version the component ran before is never overwritten.
        version = artifact.digest.split(":")[-1][:DIGEST_DIGITS]
        if folder is not None:
            copied = folder / spec.name / version / artifact.target_model
            if not copied.exists() and not config.dry_run:
                created.add(f"copied {copied}", lambda: _remove_copy(copied))
            deployer.copy_to_folder([artifact], copied.parent)
            model_data_url = copied.as_uri()
        else:
            assert config.bucket is not None  # _store_folder checked it
            bucket, key = config.bucket, f"{prefix}{spec.name}/{version}/{artifact.target_model}"
            deployer.ensure_bucket(bucket, config.create_bucket)
            if not config.dry_run and not _object_exists(deployer, bucket, key):
                created.add(f"uploaded s3://{bucket}/{key}", lambda: deployer._mutate(
                    deployer.clients.s3, "DeleteObject", Bucket=bucket, Key=key))
            deployer.upload([artifact], bucket, f"{prefix}{spec.name}/{version}/")
            model_data_url = f"s3://{bucket}/{key}"
        try:
            return _deploy(deployer, config, spec, artifact, model_data_url, image, role,
                           created)
        except Interrupted:
            raise  # what was asked goes on in the endpoint: nothing is undone
        except BaseException as exc:
            left = created.roll_back()
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted(
                    f"endpoint {config.endpoint_name} and component {spec.name} were not "
                    "changed; " + (f"rolling back left {'; '.join(left)}" if left
                                   else "nothing this run made is left"), "nothing") from None
            if left and isinstance(exc, DeployError):
                raise DeployError(f"{exc}; rolling back left {'; '.join(left)}") from exc
            raise


def _following_stopped(config: DeployConfig, spec: ComponentSpec, action: str) -> Interrupted:
    """What a Ctrl-C says once the component's change was asked (``action``: created,
    updated, unchanged): the change goes on in the endpoint without this command."""
    kind = {"created": "component-create", "updated": "component-update"}.get(action, "done")
    doing = {"component-create": "creation", "component-update": "update"}.get(kind)
    if doing is None:
        return Interrupted(f"inference component {spec.name} was not changed", kind)
    return Interrupted(f"stopped following; the {doing} of inference component {spec.name} "
                       f"continues in endpoint {config.endpoint_name}", kind)


def _remove_copy(copied: Path) -> None:
    copied.unlink(missing_ok=True)
    # the version's folder, the component's, the endpoint's
    for folder in (copied.parent, copied.parent.parent, copied.parent.parent.parent):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _object_exists(deployer: DeploySteps, bucket: str, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        deployer._read(deployer.clients.s3, "HeadObject", Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True


def _deploy(deployer: DeploySteps, config: DeployConfig, spec: ComponentSpec, artifact: Artifact,
            model_data_url: str, image: str, role: str, created: _Created) -> DeployResult:
    sm = deployer.clients.sagemaker
    environment = dict(config.environment)
    entry, model_count = entry_model(artifact.path)
    if model_count > 1 and DEFAULT_MODEL_ENV not in environment:
        # SageMaker's Triton serves one model per container outside multi-model mode: with
        # several in the tarball it needs the one to serve named (its entry, the ensemble).
        environment[DEFAULT_MODEL_ENV] = entry.name
    container = {"Image": image, "ModelDataUrl": model_data_url, "Environment": environment}
    model_name = resource_name(
        _model_base(spec.name),
        definition_digest({"container": container, "role": role, "artifact": artifact.digest}))
    if deployer._create_once("Model", model_name, PrimaryContainer=container,
                             ExecutionRoleArn=role):
        created.add(f"model {model_name}", lambda: deployer._mutate(
            sm, "DeleteModel", ModelName=model_name))

    config_name = _ensure_endpoint(deployer, config, spec, role, created)
    action = _ensure_component(deployer, config, spec, model_name, created)
    result = DeployResult(config.endpoint_name, model_name, config_name, model_data_url,
                          [artifact], "dry-run" if config.dry_run else action)
    if config.dry_run:
        deployer._say(f"would wait for inference component {spec.name} to be InService")
        return result
    try:
        described = wait_for_component(deployer, spec.name, config.wait_delay_s,
                                       config.wait_max_attempts)
    except KeyboardInterrupt:
        raise _following_stopped(config, spec, action) from None
    if config.smoke:
        try:
            result.smoke = [_smoke(deployer, config, spec, artifact, described)]
        except KeyboardInterrupt:
            raise Interrupted(f"inference component {spec.name} is InService; the smoke "
                              "invocation was stopped", "done") from None
        if not result.smoke[0].ok:
            raise DeployError(f"smoke invocation of inference component {spec.name} failed: "
                              f"{result.smoke[0].detail}")
    _forget_superseded_models(deployer, spec.name, keep=model_name)
    return result


def _delete_tarball(deployer: DeploySteps, url: str, keep: str) -> None:
    """A superseded model's tarball (``url``), once no kept model names it: only one this
    deployer put in a version folder of a component (``.../<component>/<digest>/<name>``)."""
    from urllib.parse import unquote, urlparse

    if url == keep:
        return
    parsed = urlparse(url)
    parts = Path(unquote(parsed.path)).parts
    if len(parts) < 3 or not re.fullmatch(f"[0-9a-f]{{{DIGEST_DIGITS}}}", parts[-2]):
        return
    if parsed.scheme == "file":
        copied = Path(unquote(parsed.path))
        if copied.is_file():
            deployer._say(f"delete {copied}")
            _remove_copy(copied)
    elif parsed.scheme == "s3":
        deployer._mutate(deployer.clients.s3, "DeleteObject", Bucket=parsed.netloc,
                         Key=parsed.path.lstrip("/"))


def _ensure_endpoint(deployer: DeploySteps, config: DeployConfig, spec: ComponentSpec, role: str,
                     created: _Created) -> str:
    """The endpoint for components: reused when it exists (InService, for components), else
    created with its config. Returns the config's name."""
    sm = deployer.clients.sagemaker
    name = config.endpoint_name
    current = deployer._settled_endpoint(config, name)
    if current is not None:
        config_name: str = current["EndpointConfigName"]
        if current["EndpointStatus"] not in ("InService", "Creating", "Updating"):
            raise DeployError(
                f"endpoint {name} is {current['EndpointStatus']} "
                f"({current.get('FailureReason', 'no reason given')}): tear it down "
                f"(mme teardown --endpoint-name {name}) or pick another --endpoint-name")
        described = deployer._read(sm, "DescribeEndpointConfig", EndpointConfigName=config_name)
        if any(v.get("ModelName") for v in described.get("ProductionVariants", [])):
            raise DeployError(
                f"endpoint {name} hosts models (its config {config_name} names a model), not "
                "inference components: pick another --endpoint-name, or deploy without "
                "--inference-component")
        deployer._say(f"reusing endpoint {name} (config {config_name}; its instance type and "
                      "count are kept)")
        return config_name

    variant: dict[str, Any] = {
        "VariantName": config.variant_name,
        "InstanceType": config.instance_type,
        "InitialInstanceCount": config.instance_count,
    }
    if spec.min_instances is not None:
        variant["ManagedInstanceScaling"] = {"Status": "ENABLED",
                                             "MinInstanceCount": spec.min_instances,
                                             "MaxInstanceCount": spec.max_instances}
    if spec.routing is not None:
        variant["RoutingConfig"] = {"RoutingStrategy": spec.routing}
    config_name = resource_name(
        name, definition_digest({"components-variant": variant, "role": role}))
    if deployer._create_once("EndpointConfig", config_name, ExecutionRoleArn=role,
                             ProductionVariants=[variant]):
        created.add(f"endpoint config {config_name}", lambda: deployer._mutate(
            sm, "DeleteEndpointConfig", EndpointConfigName=config_name))
    endpoint_creating = Interrupted(f"stopped following; the creation of endpoint {name} "
                                    f"continues; inference component {spec.name} is not "
                                    "created yet", "endpoint-create")
    if not deployer._ask_create_endpoint(name, config_name):
        raise endpoint_creating

    def delete_endpoint() -> None:
        deployer._mutate(sm, "DeleteEndpoint", EndpointName=name)
        deployer._wait_deleted(config, name)

    created.add(f"endpoint {name}", delete_endpoint)
    if config.dry_run:
        deployer._say(f"would wait for endpoint {name} to be InService")
        return config_name
    try:
        deployer._wait(config, name)
    except KeyboardInterrupt:
        raise endpoint_creating from None
    return config_name


def _ensure_component(deployer: DeploySteps, config: DeployConfig, spec: ComponentSpec,
                      model_name: str, created: _Created) -> str:
    sm = deployer.clients.sagemaker
    specification = {"ModelName": model_name, "ComputeResourceRequirements": spec.resources()}
    runtime_config = {"CopyCount": spec.copies}
    current = deployer._exists("DescribeInferenceComponent", InferenceComponentName=spec.name)
    if current is None:
        if not deployer._ask("CreateInferenceComponent", lambda: deployer._exists(
                "DescribeInferenceComponent", InferenceComponentName=spec.name) is not None,
                InferenceComponentName=spec.name, EndpointName=config.endpoint_name,
                VariantName=config.variant_name, Specification=specification,
                RuntimeConfig=runtime_config):
            raise _following_stopped(config, spec, "created")

        def delete_component() -> None:
            deployer._mutate(sm, "DeleteInferenceComponent", InferenceComponentName=spec.name)
            wait_for_component_deleted(deployer, spec.name, config.wait_delay_s,
                                       config.wait_max_attempts)

        created.add(f"inference component {spec.name}", delete_component)
        return "created"
    if current.get("EndpointName") != config.endpoint_name:
        raise DeployError(f"inference component {spec.name} already exists on endpoint "
                          f"{current.get('EndpointName')}: pick another --inference-component "
                          "name (names are unique in the account and region)")
    if current["InferenceComponentStatus"] in ("Creating", "Updating") and not config.dry_run:
        current = wait_for_component(deployer, spec.name, config.wait_delay_s,
                                     config.wait_max_attempts)
    if current["InferenceComponentStatus"] in ("Failed", "Deleting"):
        # SageMaker takes no update of a Failed component: it can only be deleted.
        raise DeployError(
            f"inference component {spec.name} is {current['InferenceComponentStatus']} "
            f"({current.get('FailureReason') or 'no reason given'}): delete it first "
            f"(mme teardown --endpoint-name {config.endpoint_name} --inference-component "
            f"{spec.name}), then deploy again")
    deployed = current.get("Specification", {})
    same = (deployed.get("ModelName") == model_name
            and _same_resources(deployed.get("ComputeResourceRequirements", {}),
                                spec.resources())
            and current.get("RuntimeConfig", {}).get("DesiredCopyCount") == spec.copies)
    if same:
        deployer._say(f"unchanged inference component {spec.name}")
        return "unchanged"

    def took() -> bool:
        now = deployer._read(sm, "DescribeInferenceComponent", InferenceComponentName=spec.name)
        return bool(now["InferenceComponentStatus"] == "Updating"
                    or now.get("Specification", {}).get("ModelName") == model_name)

    answered = deployer._ask("UpdateInferenceComponent", took, InferenceComponentName=spec.name,
                             Specification=specification, RuntimeConfig=runtime_config)
    created.keep()  # the component (not ours to delete) now runs the new model
    if not answered:  # a Ctrl-C after SageMaker took it: the update goes on
        raise _following_stopped(config, spec, "updated")
    return "updated"


def _same_resources(deployed: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """[U] Only what the flags ask for is compared: SageMaker may describe members it filled in
    itself, which must not make every re-run an update."""
    return all(k in deployed and float(deployed[k]) == float(v) for k, v in wanted.items())


def wait_for_component(deployer: DeploySteps, name: str, delay_s: float,
                       max_attempts: int) -> dict[str, Any]:
    """DescribeInferenceComponent every ``delay_s`` until the component is InService, saying
    each change of status and copy count (there is no botocore waiter for components)."""
    said = None
    for _ in range(max_attempts):
        described = deployer._read(deployer.clients.sagemaker, "DescribeInferenceComponent",
                                   InferenceComponentName=name)
        status = described["InferenceComponentStatus"]
        copies = described.get("RuntimeConfig") or {}
        line = (f"inference component {name}: {status}, copies "
                f"{copies.get('CurrentCopyCount', 0)}/{copies.get('DesiredCopyCount', '?')}")
        if line != said:
            deployer._say(line)
            said = line
        if status == "InService":
            return described
        if status == "Failed":
            raise DeployError(f"inference component {name} failed: "
                              f"{described.get('FailureReason', 'no reason given')}")
        time.sleep(delay_s)
    raise DeployError(f"inference component {name} was not InService after {max_attempts} "
                      "polls; look at DescribeInferenceComponent")


def wait_for_component_deleted(deployer: DeploySteps, name: str, delay_s: float,
                               max_attempts: int = 120) -> None:
    for _ in range(max_attempts):
        if deployer._exists("DescribeInferenceComponent", InferenceComponentName=name) is None:
            return
        time.sleep(delay_s)
    raise DeployError(f"inference component {name} was still there after {max_attempts} polls")


def _smoke(deployer: DeploySteps, config: DeployConfig, spec: ComponentSpec, artifact: Artifact,
           described: dict[str, Any]) -> SmokeResult:
    label = f"smoke inference component {spec.name}"
    if not (described.get("RuntimeConfig") or {}).get("CurrentCopyCount"):
        deployer._say(f"{label}: skipped (no copy to serve it)")
        return SmokeResult(spec.name, True, "skipped: no copy")
    payload = config.payloads.get(spec.name) or config.payloads.get(artifact.target_model)
    try:
        if payload is not None:
            body, content_type = Path(payload).read_bytes(), "application/json"
        else:
            body, content_type = auto_payload(artifact.path)
    except (DeployError, OSError) as exc:
        deployer._say(f"{label}: skipped ({exc})")
        return SmokeResult(spec.name, True, f"skipped: {exc}")
    try:
        response = deployer.clients.runtime.invoke_endpoint(
            EndpointName=config.endpoint_name, InferenceComponentName=spec.name,
            ContentType=content_type, Body=body)
        size = len(response["Body"].read())
    except Exception as exc:  # noqa: BLE001 - reported, and the deployment rolled back
        deployer._say(f"{label}: FAILED {exc}")
        return SmokeResult(spec.name, False, str(exc))
    deployer._say(f"{label}: ok ({size} bytes, {response.get('ContentType')})")
    return SmokeResult(spec.name, True, f"{size} bytes")


def _owned_models(deployer: DeploySteps, component: str) -> list[str]:
    base = _model_base(component)
    owned = re.compile(re.escape(base) + r"-[0-9a-f]{8}")
    names = []
    for page in deployer.clients.sagemaker.get_paginator("list_models").paginate(
            NameContains=base):
        names += [m["ModelName"] for m in page["Models"]]
    return [n for n in names if owned.fullmatch(n)]


def _forget_superseded_models(deployer: DeploySteps, component: str, keep: str) -> None:
    """The models earlier runs made for this component, now that it runs ``keep``, and their
    tarballs when the kept model does not use the same one."""
    sm = deployer.clients.sagemaker
    kept = ((deployer._exists("DescribeModel", ModelName=keep) or {}).get("PrimaryContainer")
            or {}).get("ModelDataUrl", "")
    for name in _owned_models(deployer, component):
        if name != keep:
            model = deployer._exists("DescribeModel", ModelName=name) or {}
            url = (model.get("PrimaryContainer") or {}).get("ModelDataUrl")
            deployer._mutate(sm, "DeleteModel", ModelName=name)
            if url:
                _delete_tarball(deployer, url, kept)


def teardown_components(deployer: DeploySteps, endpoint_name: str, only: str | None,
                        wait_delay_s: float) -> tuple[set[str], list[str]]:
    """Delete the endpoint's inference components (or just ``only``), each waited for until
    gone; the models they ran, and those this deployer made for them, are deleted when no
    component left uses them. Returns (models the caller deletes with the endpoint, the
    components still on the endpoint)."""
    sm = deployer.clients.sagemaker
    on_endpoint = []
    for page in sm.get_paginator("list_inference_components").paginate(
            EndpointNameEquals=endpoint_name):
        on_endpoint += [c["InferenceComponentName"] for c in page["InferenceComponents"]]
    if only is not None and only not in on_endpoint:
        raise DeployError(f"endpoint {endpoint_name} has no inference component {only!r} "
                          f"(it has: {', '.join(on_endpoint) or 'none'})")
    going = [only] if only is not None else on_endpoint
    models: set[str] = set()
    for name in going:
        described = deployer._exists("DescribeInferenceComponent", InferenceComponentName=name)
        if described is None:
            continue
        model = (described.get("Specification") or {}).get("ModelName")
        models.update([model] if model else [])
        models.update(_owned_models(deployer, name))
        delete_scaling(deployer, [f"inference-component/{name}"])
        deployer._mutate(sm, "DeleteInferenceComponent", InferenceComponentName=name)
        if not deployer._dry_run:
            wait_for_component_deleted(deployer, name, wait_delay_s)
    left = [n for n in on_endpoint if n not in going]
    if not left:
        return models, []
    still_used = set()
    for name in left:
        described = deployer._exists("DescribeInferenceComponent", InferenceComponentName=name)
        still_used.add(((described or {}).get("Specification") or {}).get("ModelName"))
    for model in sorted(models - still_used):
        if deployer._exists("DescribeModel", ModelName=model) is not None:
            deployer._mutate(sm, "DeleteModel", ModelName=model)
    return set(), left
