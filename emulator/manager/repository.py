"""Reading an extracted model artifact and installing it into Triton's repository, namespaced.

Layouts accepted (``mme package`` documents them):
- ``tar -C repo .``: ``./ensemble/config.pbtxt``, ``./preprocess/...`` (a model repository);
- a top-level folder: ``repo/ensemble/config.pbtxt`` or ``my_model/config.pbtxt``;
- a single model at the root: ``./config.pbtxt``, ``./1/model.onnx``.

Entry model: the one ensemble that no other ensemble uses as a step; else the only model; else,
with several models and no ensemble, what Triton's SageMaker server loads: the folder its
directory listing (``readdir``) gives last, the same listing read here (which folder that is
depends on the file system: a warning says so). The tarball's other models are not loaded: a
Python model that calls one of them by name (BLS) gets Triton's error for a model that is not
loaded, as on SageMaker. Several top-level ensembles are a clear error.

Model folder names Triton cannot take (a control character such as a newline) fail the load at
once, naming the folder. Version folders are the ones Triton loads (``versions_loaded``): a name
starting with 0 is ignored; a negative one (``-1``) is a version, and a Python model's stub exits
importing it (measured on Triton 2.51), so such a load is refused at once (``negative_version``).

Namespacing: SageMaker's Triton registers each artifact as its own repository, so two artifacts may
both hold ``preprocess/``. Over Triton's HTTP API we get the same effect by installing every model
as ``<model>--<key>`` (``key`` unique per artifact), with ``config.pbtxt`` rewritten (its ``name``
and the ensemble steps' ``model_name``) and every other file symlinked, never copied.

Isolation: an ensemble step must name a model of its own tarball. Every model of every tarball
shares one Triton here, so a step naming another tarball's installed name (``add_one--<key>``, a
hash anyone can compute) would otherwise reach it; with Triton's own per-repository namespacing
such a step does not resolve and the load fails, so we refuse it the same way (``check_steps``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from emulator.triton import environments
from emulator.triton.releases import Release

log = logging.getLogger(__name__)

CONFIG = "config.pbtxt"
SEPARATOR = "--"


class InvalidModelRepository(Exception):
    """The artifact is not a Triton model repository this emulator can serve."""


@dataclass
class ArtifactLayout:
    root: Path  # the folder holding the model folders
    models: dict[str, Path]  # model name -> its folder
    configs: dict[str, model_config_pb2.ModelConfig]
    entry: str
    composing: list[str] = field(default_factory=list)


def _read_config(path: Path) -> model_config_pb2.ModelConfig:
    try:
        return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise InvalidModelRepository(f"{path.name} of model '{path.parent.name}' does not parse: "
                                     f"{exc}") from exc


def _model_dirs(folder: Path) -> dict[str, Path]:
    models = {p.name: p for p in sorted(folder.iterdir())
              if p.is_dir() and not p.name.startswith(".") and (p / CONFIG).is_file()}
    for name in models:
        check_model_name(name)
    return models


def bad_name_characters(name: str) -> list[str]:
    """The characters of a model folder's name that Triton cannot take as a model name (control
    characters: a newline, a tab ...); empty when it can."""
    return sorted({c for c in name if ord(c) < 0x20 or ord(c) == 0x7F})


def check_model_name(name: str) -> None:
    """A model folder's name Triton can take: no control characters (a newline, a tab ...)."""
    bad = bad_name_characters(name)
    if bad:
        raise InvalidModelRepository(
            f"model folder {name!r} has a control character in its name "
            f"({', '.join(repr(c) for c in bad)}), which Triton cannot take as a model name; "
            "rename the folder (and the name in its config.pbtxt) with letters, digits, '_' "
            "or '-'")


_VERSION = re.compile(r"-?[1-9][0-9]*")


def versions_loaded(subfolders: Iterable[str],
                    config: model_config_pb2.ModelConfig) -> list[str]:
    """The sub-folders Triton loads as versions of a model, under its version policy.

    Triton's model repository (Model Versions): a sub-folder is a version when its name is a
    number; one whose name starts with 0 (``0``, ``01``) is ignored. A negative name is a number
    to Triton (measured on 2.51: ``-1`` alone, or under ``version_policy: all``, is loaded as
    version -1). The default policy is ``latest { num_versions: 1 }``.
    """
    versions = sorted((int(name), name) for name in subfolders if _VERSION.fullmatch(name))
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return [name for _, name in versions]
    if choice == "specific":
        wanted = set(policy.specific.versions)
        return [name for number, name in versions if number in wanted]
    count = policy.latest.num_versions if choice == "latest" else 1
    return [name for _, name in versions[-max(count, 1):]] if versions else []


def negative_version(folder: Path, config: model_config_pb2.ModelConfig) -> str | None:
    """The negative version folder a Python model's load would load (Triton's stub exits
    importing a model from it: the load never completes), or None."""
    if config.backend != "python":
        return None
    names = [p.name for p in folder.iterdir() if p.is_dir()]
    return next((name for name in versions_loaded(names, config) if name.startswith("-")),
                None)


def listing_order(folder: Path) -> list[str]:
    """The folders of ``folder`` in the order its directory listing gives them (``readdir``:
    what Triton's SageMaker server walks), links to folders apart as it leaves them."""
    with os.scandir(folder) as entries:
        return [e.name for e in entries if e.is_dir(follow_symlinks=False)]


def read_single_model_layout(extracted: Path, default_model: str | None) -> ArtifactLayout:
    """A SingleModel endpoint's tarball, with the checks Triton's ``serve`` makes at start-up.

    ``serve`` refuses a config.pbtxt at the top of /opt/ml/model, a missing named default model,
    an empty repository, and several models without SAGEMAKER_TRITON_DEFAULT_MODEL_NAME.
    """
    if (extracted / CONFIG).is_file():
        raise InvalidModelRepository(
            "config.pbtxt found at the top of /opt/ml/model: a SingleModel endpoint needs a model "
            "repository (package the model folder, e.g. `mme package REPO -o model.tar.gz`)")
    layout = read_layout(extracted, entry_name_may_differ=False)
    if default_model:
        if default_model not in layout.models:
            raise InvalidModelRepository(
                f"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME={default_model} but the repository has no "
                f"such model directory (it has: {', '.join(sorted(layout.models))})")
        layout.entry = default_model
    elif len(layout.models) > 1:
        raise InvalidModelRepository(
            f"the repository holds {len(layout.models)} models; set "
            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME in the container's Environment to run the "
            "ensemble (or the model) that should serve /invocations")
    return layout


def read_layout(extracted: Path, entry_name_may_differ: bool = True) -> ArtifactLayout:
    """The models of a tarball and the one that serves it.

    On a multi-model endpoint Triton's SageMaker server registers the tarball with a mapping to
    its TargetModel, so the entry model's folder may differ from the ``name`` in its config.pbtxt
    (the BERT-TensorRT MME notebook builds folder ``bert_0`` with name ``bert``); every other
    model must match, as Triton requires (``entry_name_may_differ=False``: all must match).
    """
    if (extracted / CONFIG).is_file():
        config = _read_config(extracted / CONFIG)
        name = config.name or "model"
        check_steps({name: config})
        return ArtifactLayout(extracted.parent, {name: extracted}, {name: config}, name)
    models = _model_dirs(extracted)
    if not models:
        subdirs = [p for p in extracted.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if len(subdirs) == 1:
            layout = read_layout(subdirs[0], entry_name_may_differ)
            if len(layout.models) > 1:  # served here, but not by SageMaker
                log.warning("the tarball's models (%s) are under %s/, one folder down: "
                            "SageMaker's Triton looks for them at the tarball's root and would "
                            "not load them; package the repository with its model folders at "
                            "the root (mme package REPO -o x.tar.gz, layout flat)",
                            ", ".join(sorted(layout.models)), subdirs[0].name)
            return layout
        raise InvalidModelRepository(
            "no model found: expected config.pbtxt at the archive root or in model folders "
            "(package with `mme package REPO -o model.tar.gz`)"
        )
    configs = {name: _read_config(path / CONFIG) for name, path in models.items()}
    check_steps(configs)
    entry = choose_entry(configs, listing_order(extracted))
    for name, config in configs.items():
        if config.name and config.name != name and not (entry_name_may_differ and name == entry):
            raise InvalidModelRepository(
                f"model folder '{name}' has name \"{config.name}\" in its config.pbtxt; "
                "Triton requires them to match"
                + (" (only the tarball's entry model may differ)" if entry_name_may_differ else "")
            )
    return ArtifactLayout(extracted, models, configs, entry)


def check_steps(configs: dict[str, model_config_pb2.ModelConfig]) -> None:
    """Every ensemble step must name a model of this tarball (see Isolation above)."""
    for name, config in sorted(configs.items()):
        for step in config.ensemble_scheduling.step:
            if step.model_name not in configs:
                raise InvalidModelRepository(
                    f"ensemble '{name}' has a step naming model '{step.model_name}', which is not "
                    f"in this tarball (it has: {', '.join(sorted(configs))}). An ensemble can "
                    "only use models packaged with it: add the model's folder to the tarball.")


def choose_entry(configs: dict[str, model_config_pb2.ModelConfig],
                 listed: list[str] | None = None) -> str:
    """The model a load of the tarball loads. ``listed``: the tarball root's folders in
    directory-listing order (``listing_order``); without it, several models and no ensemble
    are refused as ambiguous."""
    ensembles = {n for n, c in configs.items() if c.platform == "ensemble"}
    used = {s.model_name for n in ensembles for s in configs[n].ensemble_scheduling.step}
    top = sorted(ensembles - used)
    if len(top) == 1:
        return top[0]
    if len(top) > 1:
        raise InvalidModelRepository(
            f"the artifact holds several top-level ensembles ({', '.join(top)}); "
            "SageMaker's Triton would pick one arbitrarily. Package one ensemble per tarball."
        )
    if len(configs) == 1:
        return next(iter(configs))
    if listed:
        last = listed[-1]
        if last not in configs:
            raise InvalidModelRepository(
                f"the artifact holds {len(configs)} models ({', '.join(sorted(configs))}) and "
                f"no ensemble; SageMaker's Triton loads the folder its directory listing gives "
                f"last, here '{last}', which holds no config.pbtxt. Add an ensemble or package "
                "one model per tarball.")
        log.warning("the artifact holds %d models (%s) and no ensemble: loading '%s', the "
                    "folder the directory listing gives last, as SageMaker's Triton does (its "
                    "disk may list another last); the others are not loaded, so a model "
                    "calling them by name (BLS) fails. Add an ensemble or package one model "
                    "per tarball.", len(configs), ", ".join(sorted(configs)), last)
        return last
    raise InvalidModelRepository(
        f"the artifact holds {len(configs)} models ({', '.join(sorted(configs))}) and no "
        "ensemble; SageMaker's Triton would pick one arbitrarily. Add an ensemble or package "
        "one model per tarball."
    )


def namespaced(model: str, key: str) -> str:
    return f"{model}{SEPARATOR}{key}"


def run_on_cpu(config: model_config_pb2.ModelConfig) -> bool:
    """Turn ``KIND_GPU`` instance groups into ``KIND_CPU`` (no GPU here). True if it changed."""
    changed = False
    for group in config.instance_group:
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU:
            group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
            del group.gpus[:]
            changed = True
    return changed


def loaded_models(layout: ArtifactLayout) -> list[str]:
    """The models a load of the artifact loads: its entry and, through ensemble steps, every
    model it runs (Triton loads no other: the rest of the tarball stays on disk)."""
    seen: list[str] = []
    pending = [layout.entry]
    while pending:
        model = pending.pop()
        if model in seen or model not in layout.configs:
            continue
        seen.append(model)
        pending.extend(step.model_name for step in
                       layout.configs[model].ensemble_scheduling.step)
    return sorted(seen)


def asks_for_gpu(layout: ArtifactLayout) -> bool:
    """True when a model the artifact's load loads has a ``KIND_GPU`` instance group."""
    return any(group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
               for model in loaded_models(layout)
               for group in layout.configs[model].instance_group)


def _latest_version(folder: Path) -> int:
    """The version Triton's default policy (latest 1) loads, as its messages name it."""
    versions = [int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()]
    return max(versions, default=1)


def gpu_refusal(layout: ArtifactLayout, instance_gpus: int | None,
                entry_name: str | None = None) -> str | None:
    """Triton's own answer to a load whose ``KIND_GPU`` instance groups the instance cannot
    hold, or None when it can (``instance_gpus`` None: the endpoint has no InstanceType, so
    every group loads, on this machine's GPUs or on CPU).

    On an instance with no GPU (ml.m5, ml.c5, ml.inf2 ...) Triton fails a ``KIND_GPU`` group
    ("has kind KIND_GPU but no GPUs are available"); with ``gpus: [n]``, an id the instance does
    not have ("specifies invalid or unsupported gpu id"). Its load answer wraps the reason in
    "load failed for model ...: version N is at UNAVAILABLE state: Invalid argument: ...;".
    ``entry_name``: the entry model's name in it (SageMaker's Triton registers the entry under
    the TargetModel's name); every other model is named by its folder.
    """
    if instance_gpus is None:
        return None
    for model in loaded_models(layout):
        for index, group in enumerate(layout.configs[model].instance_group):
            if group.kind != model_config_pb2.ModelInstanceGroup.KIND_GPU:
                continue
            shown = _shown(layout, model, entry_name)
            name = group.name or f"{shown}_{index}"
            if instance_gpus == 0:
                reason = (f"instance group {name} of model {shown} has kind KIND_GPU but no "
                          "GPUs are available")
            else:
                bad = [gpu for gpu in group.gpus if not 0 <= gpu < instance_gpus]
                if not bad:
                    continue
                reason = (f"instance group {name} of model {shown} specifies invalid or "
                          f"unsupported gpu id {bad[0]}. GPUs with at least the minimum "
                          "required CUDA compute compatibility of 6.000000 are: "
                          + ", ".join(str(gpu) for gpu in range(instance_gpus)))
            return _load_failed(shown, _latest_version(layout.models[model]),
                                f"Invalid argument: {reason}")
    return None


def _shown(layout: ArtifactLayout, model: str, entry_name: str | None) -> str:
    """A model as Triton's answers name it: SageMaker's Triton registers the entry under the
    TargetModel's name (``entry_name``); every other model is named by its folder."""
    return entry_name if entry_name and model == layout.entry else model


def _load_failed(shown: str, version: int | str, reason: str) -> str:
    """Triton's answer to a load that failed: the reason wrapped as its load answer wraps it."""
    return (f"load failed for model '{shown}': version {version} is at UNAVAILABLE state: "
            f"{reason};\n")


def version_refusal(layout: ArtifactLayout, entry_name: str | None = None) -> str | None:
    """The answer to a load that would load a Python model's negative version folder, or None.

    Triton takes ``-1`` for a version (``versions_loaded``) and the Python backend's stub exits
    importing a model from that folder: on SageMaker the load never completes; here it fails at
    once, naming the folder."""
    for model in loaded_models(layout):
        name = negative_version(layout.models[model], layout.configs[model])
        if name is not None:
            return _load_failed(
                _shown(layout, model, entry_name), name,
                f"Internal: the Python backend's stub exits importing the model from its version "
                f"folder '{name}' (a negative version), and Triton's load never completes. Name "
                "version folders 1, 2, 3 ... (positive numbers, no leading zeros or signs)")
    return None


def environment_problems(layout: ArtifactLayout,
                         release: Release) -> list[tuple[str, environments.Problem]]:
    """What ``release``'s Triton makes of the EXECUTION_ENV_PATH environment of each model the
    load loads (``environments.judge``, the check ``mme lint`` makes): (model, problem) pairs.
    An environment that is missing or unreadable is left to Triton's own answer."""
    found = []
    for model in loaded_models(layout):
        path = environments.env_path(layout.configs[model])
        relative = environments.in_model_folder(path) if path else None
        if relative is None:
            continue
        env = layout.models[model] / relative
        try:
            with open(env, "rb") as stream:
                facts = environments.scan(stream)
        except (tarfile.TarError, OSError, EOFError):
            continue
        found += [(model, problem)
                  for problem in environments.judge(f"{model}/{relative}", facts, release)]
    return found


def environment_refusal(layout: ArtifactLayout, problems: list[tuple[str, environments.Problem]],
                        entry_name: str | None = None) -> str | None:
    """Triton's answer to a load whose environment fails it (``environment_problems``), with
    the cause and the fix; None when none does."""
    for model, problem in problems:
        if problem.fails_load:
            return _load_failed(
                _shown(layout, model, entry_name), _latest_version(layout.models[model]),
                f"Internal: {problem.triton_says} ({problem.detail}; {problem.fix})")
    return None


def outputs_refusal(layout: ArtifactLayout,
                    problems: list[tuple[str, environments.Problem]]) -> bytes | None:
    """What every inference of the load's entry is answered when an environment makes its
    outputs fail (numpy 2 before Triton 2.53), with the cause and the fix; else None."""
    for model, problem in problems:
        if not problem.fails_load:
            outputs = layout.configs[layout.entry].output or layout.configs[model].output
            said = environments.NUMPY2_ANSWER.format(
                output=outputs[0].name if outputs else "OUTPUT")
            return json.dumps({"error": f"{said} ({problem.detail}; {problem.fix})"}).encode()
    return None


def install(layout: ArtifactLayout, key: str, triton_repository: Path,
            gpus_available: bool = True) -> list[str]:
    """Write ``<model>--<key>`` folders into Triton's repository; returns their names.

    Each folder holds the rewritten config.pbtxt and symlinks to the artifact's files, so the
    artifact itself stays byte-for-byte what was uploaded. Without a GPU, ``KIND_GPU`` instance
    groups run as ``KIND_CPU`` so the tarball built for a GPU endpoint still runs here.
    """
    check_steps(layout.configs)  # also for layouts built by hand (defence in depth)
    installed = []
    for model, source in layout.models.items():
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(layout.configs[model])
        config.name = namespaced(model, key)
        if not gpus_available and run_on_cpu(config):
            log.warning("model %s asks for KIND_GPU instances; no GPU here, running them on CPU",
                        model)
        for step in config.ensemble_scheduling.step:
            step.model_name = namespaced(step.model_name, key)
        target = triton_repository / config.name
        if target.exists() or target.is_symlink():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for entry in source.iterdir():
            if entry.name != CONFIG:
                os.symlink(entry.resolve(), target / entry.name)
        (target / CONFIG).write_text(text_format.MessageToString(config))
        installed.append(config.name)
    return installed


def uninstall(names: list[str], triton_repository: Path) -> None:
    for name in names:
        shutil.rmtree(triton_repository / name, ignore_errors=True)
