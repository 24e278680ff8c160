"""Builds one instance's parts from the settings: launcher, Triton client, model source, manager.

The composition root (``emulator.app``) hands ``InstanceFactory.build`` to the registry, so the
hosting classes never read settings or pick a launcher themselves.

GPUs: on a machine with several GPUs, instances take one GPU each in turn (instance k gets GPU
k mod n), as each SageMaker instance has its own; with one GPU or none, every instance sees all.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from emulator.hosting.instance import ErrorContext, Instance
from emulator.hosting.spec import EndpointSpec, VariantSpec
from emulator.manager.models import ModelManager
from emulator.manager.store import source_for
from emulator.metrics import EndpointMetrics
from emulator.settings import Settings
from emulator.triton.client import TritonClient
from emulator.triton.docker_launcher import DockerLauncher
from emulator.triton.embedded import EmbeddedLauncher
from emulator.triton.external import ExternalLauncher
from emulator.triton.launcher import LauncherError, TritonLauncher, TritonOptions, count_gpus
from emulator.triton.sagemaker_env import SageMakerEnvironmentError, triton_args_from_environment


class InstanceFactory:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._gpu_turn = itertools.count()

    def _gpu_for_next_instance(self) -> str | None:
        gpus = count_gpus() if self.settings.launcher != "external" else 0
        if gpus < 2 or self.settings.gpus == "none":
            return None
        return str(next(self._gpu_turn) % gpus)

    def make_launcher(self, endpoint: EndpointSpec, variant: VariantSpec,
                      options: TritonOptions, work_dir: Path, name: str) -> TritonLauncher:
        """Pick the launcher by ``--launcher``; the container's Environment becomes flags."""
        settings, container = self.settings, variant.container
        if settings.launcher == "external" and (len(endpoint.variants) > 1
                                                or variant.instance_count > 1):
            raise LauncherError("--launcher external serves one Triton: an endpoint with several "
                                "variants or instances needs the embedded or docker launcher")
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
            # --image wins over the model's Image: it maps the production image (an ECR URI
            # that cannot be pulled here) to one this machine has.
            return DockerLauncher(options, work_dir, image=settings.image or container.image,
                                  cache_dir=settings.cache_dir, mounts=settings.docker_mounts,
                                  shm_size=settings.shm_size, gpus=settings.gpus,
                                  name=name.replace("/", "-"), gpu_device=gpu)
        if settings.launcher == "external":
            if not settings.triton_url:
                raise LauncherError("--launcher external needs --triton-url")
            return ExternalLauncher(options, settings.triton_url,
                                    repository=settings.triton_repository)
        raise LauncherError(f"unknown launcher {settings.launcher!r}: embedded, docker or "
                            "external")

    async def build(self, endpoint: EndpointSpec, variant: VariantSpec, instance_id: str,
                    work_dir: Path, variant_metrics: EndpointMetrics) -> Instance:
        settings, container = self.settings, variant.container
        work_dir.mkdir(parents=True, exist_ok=True)
        options = TritonOptions(repository=work_dir / "triton-repo")
        name = endpoint.name if (len(endpoint.variants) == 1 and variant.instance_count == 1) \
            else f"{endpoint.name}/{variant.name}/{instance_id}"
        launcher = self.make_launcher(endpoint, variant, options, work_dir, name)
        triton = TritonClient(launcher.http_url if launcher.is_running() else "http://0")
        metrics = variant_metrics.for_instance(instance_id)
        manager = ModelManager(
            source=source_for(container.model_data, settings.s3_endpoint_url, settings.region),
            cache_dir=work_dir,
            triton=triton,
            triton_repository=launcher.repository,
            metrics=metrics,  # type: ignore[arg-type]  # the instance's view of its variant's
            memory_budget=settings.memory_budget,
            max_loaded_models=settings.max_loaded_models,
            disk_budget=settings.disk_budget,
            max_extracted_bytes=settings.max_extracted_bytes,
            load_timeout_s=settings.model_load_timeout_s,
            cache_enabled=container.model_cache_enabled,
            single_model=not container.is_multi_model,
            default_model=container.environment.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"),
            gpus_available=count_gpus() > 0,
        )
        return Instance(instance_id, container, launcher, triton, manager, metrics, work_dir,
                        ErrorContext(endpoint.name, settings.region, settings.account_id),
                        settings.model_load_timeout_s)
