"""The checks of one source, each giving findings. ``structure`` is what ``mme package``,
``mme deploy`` and the pytest plugin's store check before anything is written or uploaded: the
checks Triton makes when SageMaker's Triton registers a TargetModel (the tarball unpacked to
``/opt/ml/models/<hash>/model/``, that folder the model repository), made on the files."""

from __future__ import annotations

import re
from typing import Any

from emulator.instance_types import lookup
from emulator.manager.repository import bad_name_characters, versions_loaded
from emulator.triton.releases import Release
from harness.lint.findings import RULES, Finding
from harness.lint.source import CONFIG, ModelFiles, Source

_BLS_CALL = re.compile(r"""InferenceRequest\s*\((?:[^()]|\([^()]*\))*?model_name\s*=\s*(['"])"""
                       r"""([^'"]+)\1""", re.DOTALL)


def parse(text: str) -> Any:
    """The ModelConfig of ``text``; raises text_format.ParseError."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def _line(text: str, pattern: str) -> int | None:
    match = re.search(pattern, text, re.MULTILINE)
    return text.count("\n", 0, match.start()) + 1 if match else None


def bls_callees(model: ModelFiles) -> dict[str, tuple[str, int]]:
    """Models a Python model's BLS requests name literally: name -> (file, line)."""
    found: dict[str, tuple[str, int]] = {}
    for relative, text in sorted(model.python.items()):
        for match in _BLS_CALL.finditer(text):
            found.setdefault(match[2], (model.path(relative), text.count("\n", 0,
                                                                          match.start(2)) + 1))
    return found


def structure(source: Source, configs: dict[str, Any]) -> list[Finding]:
    """Config parsing and naming, version folders, ensemble steps, one entry model, layout.
    ``configs`` is filled with the models whose config parses."""
    where = source.label

    def finding(rule: str, message: str, file: str = "", line: int | None = None,
                severity: str = "") -> Finding:
        return Finding(RULES[rule], f"{where}: {message}", where, file, line, severity)

    if source.layout == "deep":
        tops = ", ".join(t + "/" for t in source.deep_tops)
        return [finding("MME008", f"the model folders are under {tops}, one level too deep: "
                        "SageMaker's Triton finds no model at the tarball's root and the load "
                        "fails. Package the repository with its model folders at the root "
                        "(`mme package REPO -o x.tar.gz`, layout flat)")]
    if not source.models:
        return [finding("MME002", f"no model folder (no <model>/{CONFIG})")]
    from google.protobuf import text_format

    found: list[Finding] = []
    for folder, files in source.models.items():
        config_file = files.path(CONFIG)
        bad = bad_name_characters(folder)
        if bad:
            found.append(finding(
                "MME009", f"model folder {folder!r} has a control character in its name "
                f"({', '.join(repr(c) for c in bad)}), which Triton cannot take as a model name",
                config_file))
        try:
            configs[folder] = parse(files.config_text)
        except text_format.ParseError as exc:
            found.append(finding("MME001", f"{folder}/{CONFIG} does not parse as a Triton model "
                                 f"config: {exc}", config_file, exc.GetLine() or None))
            continue
        loaded = versions_loaded(files.subfolders, configs[folder])
        if not loaded:
            found.append(finding(
                "MME003", f"model '{folder}' has no version folder: Triton loads the numbered "
                f"sub-folders ({folder}/1/ ...; an ensemble's may be empty) and fails without "
                "one", config_file))
        for name in sorted(files.subfolders):
            number = name.removeprefix("-").removeprefix("+")
            if not number.isdigit() or name in files.versions:
                continue
            if name in loaded:
                found.append(finding(
                    "MME004", f"model '{folder}' has a folder '{name}' that Triton loads as "
                    f"version {name}; a Python model's stub exits importing it and the load "
                    "never completes", files.path(name), severity="error"))
            else:
                found.append(finding(
                    "MME004", f"model '{folder}' has a folder '{name}' that Triton does not "
                    "load as a version (a version folder is named by a number that does not "
                    "start with 0)", files.path(name)))
    ensembles = {n for n, c in configs.items() if c.platform == "ensemble"}
    for name in sorted(ensembles):
        for step in configs[name].ensemble_scheduling.step:
            if step.model_name not in source.models:
                found.append(finding(
                    "MME005", f"ensemble '{name}' has a step '{step.model_name}' that is not in "
                    f"the tarball (it has: {', '.join(sorted(source.models))}); add that "
                    "model's folder", source.models[name].path(CONFIG),
                    _line(source.models[name].config_text,
                          rf"model_name\s*:\s*\"{re.escape(step.model_name)}\"")))
    # An ensemble's steps load with it; a BLS model's callees do not (SageMaker's Triton loads
    # the entry model only, and Python's BLS loads nothing): a callee beside its caller is one
    # more model that could be picked, and is not loaded when the caller is.
    used = {s.model_name for n in ensembles for s in configs[n].ensemble_scheduling.step}
    if source.layout == "flat":
        top = sorted(ensembles - used)
        entries = top or sorted(set(source.models) - used)
        if len(entries) > 1:
            calls = sorted(f"'{folder}' calls '{callee}' (BLS)"
                           for folder, files in source.models.items()
                           for callee in bls_callees(files) if callee in entries)
            why = (f"; {', '.join(calls)}, which SageMaker's Triton does not load with it: "
                   "make the callee a step of an ensemble in the tarball, or serve the model "
                   "from a single-model endpoint" if calls else "")
            found.append(finding(
                "MME006", f"{len(entries)} models could serve the TargetModel "
                f"({', '.join(entries)}); SageMaker's Triton would pick one arbitrarily{why}. "
                "Package one model, or one ensemble with its steps, per tarball"))
        entry = entries[0] if entries else next(iter(source.models))
        for folder, config in configs.items():
            if config.name and config.name != folder and folder != entry:
                found.append(finding(
                    "MME007", f"model folder '{folder}' says name \"{config.name}\" in its "
                    f"{CONFIG}; Triton requires the two to match",
                    source.models[folder].path(CONFIG),
                    _line(source.models[folder].config_text, r"^\s*name\s*:")))
    return found


def serving(source: Source, configs: dict[str, Any], instance_type: str | None,
            release: Release) -> list[Finding]:
    """KIND_GPU and ``gpus`` against the instance type, BLS callees, decoupled models,
    ``version_policy: all``."""
    from tritonclient.grpc import model_config_pb2 as pb

    where = source.label
    found: list[Finding] = []
    kind = lookup(instance_type) if instance_type else None
    if instance_type and kind is None:
        found.append(Finding(RULES["MME103"], f"{where}: {instance_type} is not an instance type "
                             "this table knows; KIND_GPU and gpus were not checked", where, ""))
    for folder, config in configs.items():
        files = source.models[folder]
        text = files.config_text
        config_file = files.path(CONFIG)
        for group in config.instance_group:
            gpu = group.kind == pb.ModelInstanceGroup.KIND_GPU or (
                group.kind == pb.ModelInstanceGroup.KIND_AUTO and len(group.gpus) > 0)
            if kind is None or not gpu:
                continue
            if kind.gpus == 0:
                found.append(Finding(RULES["MME101"], (
                    f"{where}: model '{folder}' asks for KIND_GPU, and {kind.name} has no GPU: "
                    "SageMaker's Triton fails the load (\"has kind KIND_GPU but no GPUs are "
                    "available\")"), where, config_file, _line(text, r"KIND_GPU|gpus\s*:")))
            elif any(g >= kind.gpus for g in group.gpus):
                found.append(Finding(RULES["MME102"], (
                    f"{where}: model '{folder}' asks for GPU(s) {list(group.gpus)}; "
                    f"{kind.name} has {kind.gpus} (0 .. {kind.gpus - 1})"),
                    where, config_file, _line(text, r"gpus\s*:")))
        for callee, (file, line) in sorted(bls_callees(files).items()):
            if callee not in source.models:
                found.append(Finding(RULES["MME201"], (
                    f"{where}: model '{folder}' calls '{callee}' (BLS), which the tarball does "
                    f"not hold (it has: {', '.join(sorted(source.models))})"), where, file, line))
        if config.model_transaction_policy.decoupled:
            found.append(Finding(RULES["MME202"], (
                f"{where}: model '{folder}' is decoupled; a multi-model endpoint answers "
                "InvokeEndpoint with one response"), where, config_file,
                _line(text, r"decoupled\s*:")))
        if config.version_policy.WhichOneof("policy_choice") == "all":
            found.append(Finding(RULES["MME203"], (
                f"{where}: model '{folder}' loads all its {len(files.versions)} version(s) "
                "(version_policy all)"), where, config_file, _line(text, r"version_policy")))
        for relative in sorted(files.files):
            if relative.endswith(".plan"):
                found.append(Finding(RULES["MME401"], (
                    f"{where}: {files.path(relative)} is a TensorRT plan; it loads only if it "
                    f"was built with {release.trt} ({release.image})"), where,
                    files.path(relative)))
    return found
