"""Builds one instance's parts from the settings: launcher, Triton client, model source, manager.

The composition root (``emulator.app``) hands ``InstanceFactory.build`` to the registry, so the
hosting classes never read settings or pick a launcher themselves.

Which container runs how: a Triton image (``containers.images.is_triton_image``) runs as a
Triton behind the emulator's model manager, on the embedded or the docker launcher; any other
image runs under SageMaker's container contract (``docker run IMAGE serve``), docker only.
A model with several containers (or one non-Triton container) becomes a
``MultiContainerInstance``; a single Triton container stays the plain ``Instance``.

GPUs: on a machine with several GPUs, instances take one GPU each in turn (instance k gets GPU
k mod n), as each SageMaker instance has its own; with one GPU or none, every instance sees all.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path

from emulator.containers.images import ImageMap, is_triton_image, names_triton
from emulator.containers.sagemaker import SageMakerContainer
from emulator.contract import multi_container
from emulator.hosting.instance import PRIMARY, ErrorContext, Instance
from emulator.hosting.multi_container import (
    Member,
    MultiContainerInstance,
    ServeMember,
    TritonMember,
)
from emulator.hosting.spec import ContainerSpec, EndpointSpec, VariantSpec
from emulator.instance_types import Budget, budget_for, lookup, machine_memory_bytes
from emulator.manager.extract import extract_archive
from emulator.manager.model_manager import ModelManager
from emulator.manager.sources import source_for
from emulator.metrics import EndpointMetrics, InstanceMetrics
from emulator.settings import Settings, format_size
from emulator.supervision import LauncherError
from emulator.triton.client import TritonClient
from emulator.triton.docker_launcher import DockerLauncher
from emulator.triton.embedded import EmbeddedLauncher
from emulator.triton.external import ExternalLauncher
from emulator.triton.launcher import TritonLauncher, TritonOptions, count_gpus
from emulator.triton.memory import probe_for
from emulator.triton.releases import served_release
from emulator.triton.sagemaker_env import SageMakerEnvironmentError, triton_args_from_environment

# [U] How long a SageMaker container may take to answer GET /ping with 200 before the endpoint
# fails, unless the variant's ContainerStartupHealthCheckTimeoutInSeconds (60 to 3600) or the
# setting container_startup_timeout_s says otherwise (SageMaker's default is not published).
DEFAULT_STARTUP_TIMEOUT_S = 600.0

log = logging.getLogger(__name__)


class InstanceFactory:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.images = ImageMap.parse(settings.image)
        self._gpu_turn = itertools.count()
        self._budgets_said: set[tuple[str, str, Budget]] = set()

    def _gpu_for_next_instance(self) -> str | None:
        gpus = count_gpus() if self.settings.launcher != "external" else 0
        if gpus < 2 or self.settings.gpus == "none":
            return None
        return str(next(self._gpu_turn) % gpus)

    # --- images -----------------------------------------------------------------------------

    def local_image(self, container: ContainerSpec) -> str | None:
        """The image the docker launcher runs for this container (``--image`` mappings)."""
        return self.images.resolve(container.image)

    def _local_labels(self, image: str | None) -> dict[str, str] | None:
        """The labels of a local image, None when this engine does not have it."""
        if not image:
            return None
        import docker.errors

        from emulator.containers.docker_engine import connect

        client = connect()
        try:
            return dict(client.images.get(image).labels or {})
        except docker.errors.ImageNotFound:
            return None
        finally:
            client.close()

    def is_triton(self, container: ContainerSpec) -> bool:
        if self.settings.launcher != "docker":
            return names_triton(container.image)
        local = self.local_image(container)
        return is_triton_image(container.image, local, self._local_labels(local))

    def image_problem(self, container: dict[str, object]) -> str | None:
        """Why CreateModel cannot accept this container's Image here, or None.

        Embedded and external launchers run Triton only; the docker launcher needs a mapping or
        the image itself on this engine (an ECR URI cannot be pulled here).
        """
        image = container.get("Image")
        if not isinstance(image, str) or not image:
            return None
        if self.settings.launcher != "docker":
            if names_triton(image):
                return None
            return multi_container.image_not_found(
                image, f"the {self.settings.launcher} launcher runs Triton images only; run "
                "other SageMaker containers with --launcher docker --image "
                f"{image}=LOCAL_IMAGE")
        if self.images.mapped(image) is not None:
            return None  # pulled at CreateEndpoint if missing, with progress
        local = self.images.resolve(image)
        try:
            labels = self._local_labels(local)
        except Exception:  # noqa: BLE001 - no engine: CreateEndpoint reports it with the fix
            return None
        if labels is not None:
            return None
        return multi_container.image_not_found(
            image, f"no --image mapping names it and this Docker engine has no image {local}; "
            f"map it to a local image with --image {image}=LOCAL_IMAGE")

    # --- launchers --------------------------------------------------------------------------

    def make_launcher(self, endpoint: EndpointSpec, variant: VariantSpec,
                      options: TritonOptions, work_dir: Path, name: str,
                      container: ContainerSpec | None = None) -> TritonLauncher:
        """Pick the launcher by ``--launcher``; the container's Environment becomes flags."""
        settings = self.settings
        container = container or variant.container
        if settings.launcher == "external" and (len(endpoint.variants) > 1
                                                or variant.instance_count > 1
                                                or len(variant.containers) > 1):
            raise LauncherError("--launcher external serves one Triton: an endpoint with several "
                                "variants, instances or containers needs the embedded or docker "
                                "launcher")
        gpu_count = count_gpus() if settings.launcher != "external" else 0
        try:
            translated = triton_args_from_environment(
                container.environment, multi_model=container.is_multi_model, gpu_count=gpu_count)
        except SageMakerEnvironmentError as exc:
            raise LauncherError(f"the container's Environment is invalid: {exc}") from exc
        options.extra_args.extend(translated.args)
        options.environment.update(translated.passthrough_env)
        gpu = self._gpu_for_next_instance()
        if settings.launcher == "embedded":
            if gpu is not None:
                options.environment["CUDA_VISIBLE_DEVICES"] = gpu
            return EmbeddedLauncher(options, work_dir, tritonserver=settings.tritonserver,
                                    name=f"triton[{name}]")
        if settings.launcher == "docker":
            # --image maps the production image (an ECR URI that cannot be pulled here) to one
            # this machine has; a plain --image is the Triton image.
            return DockerLauncher(options, work_dir, image=self.local_image(container),
                                  cache_dir=settings.cache_dir, mounts=settings.docker_mounts,
                                  shm_size=settings.shm_size, gpus=settings.gpus,
                                  name=name.replace("/", "-"), gpu_device=gpu,
                                  memory_limit=self._instance_memory(variant))
        if settings.launcher == "external":
            if not settings.triton_url:
                raise LauncherError("--launcher external needs --triton-url")
            return ExternalLauncher(options, settings.triton_url,
                                    repository=settings.triton_repository)
        raise LauncherError(f"unknown launcher {settings.launcher!r}: embedded, docker or "
                            "external")

    # --- instances --------------------------------------------------------------------------

    async def build(self, endpoint: EndpointSpec, variant: VariantSpec, instance_id: str,
                    work_dir: Path, variant_metrics: EndpointMetrics
                    ) -> Instance | MultiContainerInstance:
        work_dir.mkdir(parents=True, exist_ok=True)
        name = endpoint.name if (len(endpoint.variants) == 1 and variant.instance_count == 1) \
            else f"{endpoint.name}/{variant.name}/{instance_id}"
        kinds = [await asyncio.to_thread(self.is_triton, c) for c in variant.containers]
        if not variant.is_multi_container and not variant.is_direct and kinds[0]:
            metrics = variant_metrics.for_instance(instance_id)
            return self._triton_instance(endpoint, variant, variant.container, instance_id,
                                         work_dir, name, metrics, PRIMARY)
        if self.settings.launcher != "docker" and not all(kinds):
            raise LauncherError("only the docker launcher runs containers other than Triton")
        members: list[Member] = []
        for index, (container, triton) in enumerate(zip(variant.containers, kinds,
                                                        strict=True)):
            label = (multi_container.container_label(container.hostname, index)
                     if variant.is_multi_container or variant.is_direct else PRIMARY)
            member_dir = work_dir / f"c{index + 1}"
            member_dir.mkdir(parents=True, exist_ok=True)
            member_name = f"{name}/{label}"
            if triton:
                if not container.model_data:
                    raise LauncherError(f"container {label} is a Triton container without "
                                        "ModelDataUrl: Triton needs a model repository tarball")
                metrics = variant_metrics.for_instance(f"{instance_id}/{label}")
                instance = self._triton_instance(endpoint, variant, container, instance_id,
                                                 member_dir, member_name, metrics, label)
                members.append(TritonMember(label, instance))
            else:
                members.append(await self._serve_member(
                    endpoint, variant, container, label, member_dir, member_name,
                    index if variant.is_multi_container else None))
        return MultiContainerInstance(instance_id, variant, members,
                                      variant_metrics.for_instance(instance_id),
                                      variant_metrics, work_dir, endpoint.name)

    async def _serve_member(self, endpoint: EndpointSpec, variant: VariantSpec,
                            container: ContainerSpec, label: str, work_dir: Path, name: str,
                            index: int | None) -> ServeMember:
        """Any SageMaker container: its model data extracted into what becomes /opt/ml/model."""
        settings = self.settings
        model_dir = work_dir / "model"
        model_dir.mkdir(parents=True, exist_ok=True)
        if container.model_data:
            source = source_for(container.model_data, settings.s3_endpoint_url, settings.region)
            tarball = work_dir / "model.tar.gz"
            await asyncio.to_thread(source.fetch, None, tarball)
            await asyncio.to_thread(extract_archive, tarball, model_dir,
                                    settings.max_extracted_bytes)
            tarball.unlink(missing_ok=True)
        image = self.local_image(container)
        if not image:
            raise LauncherError(f"container {label} has no Image")
        launcher = SageMakerContainer(
            image=image, label=label, environment=container.environment, model_dir=model_dir,
            member_index=index, name=name.replace("/", "-"),
            ping_timeout_s=variant.startup_timeout_s or settings.container_startup_timeout_s
            or DEFAULT_STARTUP_TIMEOUT_S)
        errors = ErrorContext(endpoint.name, settings.region, settings.account_id, label)
        return ServeMember(label, launcher, model_dir, errors)

    def _triton_instance(self, endpoint: EndpointSpec, variant: VariantSpec,
                         container: ContainerSpec, instance_id: str, work_dir: Path, name: str,
                         metrics: InstanceMetrics, label: str) -> Instance:
        settings = self.settings
        options = TritonOptions(repository=work_dir / "triton-repo")
        if not settings.triton_auto_complete:
            options.extra_args.append("--disable-auto-complete-config")
        launcher = self.make_launcher(endpoint, variant, options, work_dir, name, container)
        triton = TritonClient(launcher.http_url if launcher.is_running() else "http://0",
                              shared_memory_bytes=settings.triton_shared_memory or 0)
        budget = self.budget_of(endpoint, variant)
        manager = ModelManager(
            source=source_for(container.model_data, settings.s3_endpoint_url, settings.region),
            cache_dir=work_dir,
            triton=triton,
            triton_repository=launcher.repository,
            metrics=metrics,
            memory_budget=budget.memory_bytes,
            max_loaded_models=settings.max_loaded_models,
            gpu_memory_budget=budget.gpu_memory_bytes,
            disk_budget=settings.disk_budget,
            max_extracted_bytes=settings.max_extracted_bytes,
            load_timeout_s=settings.model_load_timeout_s,
            cache_enabled=container.model_cache_enabled,
            single_model=not container.is_multi_model,
            default_model=container.environment.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"),
            gpus_available=count_gpus() > 0,
            memory_probe=probe_for(launcher) if settings.model_memory == "measured" else None,
            instance_gpus=self.instance_gpus(variant),
            release=served_release(container.image),
            stream_downloads=settings.stream_downloads,
            overlap_count_evictions=settings.overlap_count_evictions,
            overlap_byte_evictions=settings.overlap_byte_evictions,
        )
        return Instance(instance_id, container, launcher, triton, manager, metrics, work_dir,
                        ErrorContext(endpoint.name, settings.region, settings.account_id, label),
                        settings.model_load_timeout_s, budget)

    def instance_gpus(self, variant: VariantSpec) -> int | None:
        """The GPUs of the variant's InstanceType (``--instance-type`` for the default
        endpoint): a ``KIND_GPU`` group fails to load on a type with none, as SageMaker's
        Triton fails it. None where the endpoint has no InstanceType or the table lacks it:
        every group loads [U] (on this machine's GPUs, else on CPU)."""
        known = lookup(variant.instance_type or self.settings.instance_type or "")
        return known.gpus if known else None

    def _instance_memory(self, variant: VariantSpec) -> int | None:
        """The whole memory of the variant's instance type, when the table knows it (beyond
        it the kernel's OOM killer takes a process, there as here)."""
        known = lookup(variant.instance_type or self.settings.instance_type or "")
        return known.memory_bytes if known else None

    def budget_of(self, endpoint: EndpointSpec, variant: VariantSpec) -> Budget:
        """Each instance's memory budget: ``--memory-budget``, else its InstanceType's memory
        less the platform's share (``emulator/instance_types.py``), else none.

        The default endpoint (``mme serve``) has no InstanceType of its own: ``--instance-type``
        is its. A budget beyond this machine's memory is kept as bookkeeping (models are then
        evicted where the real instance would evict them, while this machine may swap or kill
        first): said once per endpoint and variant, never shrunk.
        """
        instance_type = variant.instance_type or self.settings.instance_type
        budget = budget_for(instance_type, self.settings.memory_budget,
                            self.settings.gpu_memory_budget)
        said = (endpoint.name, variant.name, budget)
        if said in self._budgets_said:
            return budget
        self._budgets_said.add(said)
        if instance_type and lookup(instance_type) is None:
            log.warning("endpoint %s, variant %s: the emulator does not know the memory of %s; "
                        "its instances have %s memory budget (give --memory-budget for one)",
                        endpoint.name, variant.name, instance_type,
                        "the --memory-budget" if budget.memory_bytes else "no")
        if budget.beyond_machine:
            log.warning("endpoint %s, variant %s: memory budget %s (%s) is more than this "
                        "machine's memory (%s); kept as bookkeeping: models are evicted as on "
                        "the instance, but this machine may run out of memory first",
                        endpoint.name, variant.name, format_size(budget.memory_bytes),
                        budget.source, format_size(machine_memory_bytes()))
        return budget
