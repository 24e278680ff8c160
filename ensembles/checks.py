"""What SageMaker's Triton would refuse in a model repository or tarball, found before upload.

A tarball that loads here but not on SageMaker costs a 10-15 minute deploy to find out. These
checks are the ones Triton makes when SageMaker's Triton server registers a TargetModel (the
tarball is unpacked to ``/opt/ml/models/<hash>/model/`` and that folder is the model
repository), made on the files instead, so ``mme package`` and ``mme deploy`` refuse before
anything is written or uploaded:

- every ``config.pbtxt`` parses as Triton's ``ModelConfig`` (text protobuf);
- a model folder's name is the ``name`` in its config (Triton requires it; [U] on a multi-model
  endpoint the tarball's entry model may differ, as the emulator allows);
- every model has a version folder (``<model>/1/``; an ensemble's may be empty): without one
  Triton loads no version and the model fails;
- every ensemble step names a model of the same tarball;
- the tarball has one entry model: one model, or one ensemble no other ensemble uses;
- the model folders are at the tarball's root (``--layout flat``): under one top folder
  (``--layout folder``) only a single model can be found, an ensemble's models are one level
  too deep for Triton and nothing loads.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

CONFIG = "config.pbtxt"


class PackageProblem(ValueError):
    """SageMaker's Triton would not load this; the message says what to change."""


@dataclass
class ModelFiles:
    """One model folder as the checks see it, from a folder or a tarball's member list."""

    config_text: str
    versions: set[str] = field(default_factory=set)  # numeric sub-folders


def check_folder(source: Path, layout: str = "flat") -> None:
    """Check the repository ``source`` (or the model folder, with ``layout="folder"``)."""
    source = Path(source)
    if (source / CONFIG).is_file():  # a lone model folder: packaged with itself at the root
        _check({source.name: _read_model(source)}, where=str(source))
        return
    models = {p.name: _read_model(p) for p in sorted(source.iterdir())
              if p.is_dir() and not p.name.startswith(".") and (p / CONFIG).is_file()}
    if layout == "folder" and len(models) > 1:
        raise PackageProblem(
            f"{source} holds {len(models)} models ({', '.join(models)}): --layout folder puts "
            "them one level too deep, where SageMaker's Triton finds no model and the load "
            "fails; use --layout flat (the default), the layout for ensembles")
    _check(models, where=str(source))


def check_tarball(tarball: Path) -> None:
    """Check a ``.tar.gz`` as SageMaker's Triton would see it once unpacked."""
    members: dict[PurePosixPath, tarfile.TarInfo] = {}
    configs: dict[PurePosixPath, str] = {}
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                path = PurePosixPath(*[p for p in PurePosixPath(member.name).parts if p != "."])
                members[path] = member
                if path.name == CONFIG and member.isfile():
                    handle = tar.extractfile(member)
                    if handle is not None:
                        configs[path] = handle.read().decode(errors="replace")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise PackageProblem(f"{tarball.name} is not a readable .tar.gz: {exc}") from None
    if PurePosixPath(CONFIG) in configs:
        return  # a single model at the root: the emulator's lenient case, not judged here
    at_root = {p.parent for p in configs if len(p.parts) == 2}
    deeper = {p.parent for p in configs if len(p.parts) == 3}
    if not at_root and deeper:
        tops = sorted({p.parts[0] for p in deeper})
        if len(deeper) > 1:
            raise PackageProblem(
                f"{tarball.name}: the model folders are under {', '.join(t + '/' for t in tops)}"
                ", one level too deep: SageMaker's Triton finds no model at the tarball's root "
                "and the load fails. Package the repository with its model folders at the root "
                "(`mme package REPO -o x.tar.gz`, layout flat)")
        return  # one model under one folder: Triton finds it (layout folder)
    models = {}
    for folder in sorted(at_root):
        versions = {p.parts[1] for p in members if len(p.parts) >= 2 and p.parts[0] ==
                    folder.name and p.parts[1].isdigit()}
        models[folder.name] = ModelFiles(configs[folder / CONFIG], versions)
    _check(models, where=tarball.name)


def _read_model(folder: Path) -> ModelFiles:
    try:
        text = (folder / CONFIG).read_text(errors="replace")
    except OSError as exc:
        raise PackageProblem(f"cannot read {folder / CONFIG}: {exc.strerror}") from None
    versions = {p.name for p in folder.iterdir() if p.is_dir() and p.name.isdigit()}
    return ModelFiles(text, versions)


def _check(models: dict[str, ModelFiles], where: str) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    if not models:
        raise PackageProblem(f"{where}: no model folder (no <model>/{CONFIG})")
    configs = {}
    for folder, files in models.items():
        config = model_config_pb2.ModelConfig()
        try:
            text_format.Parse(files.config_text, config)
        except text_format.ParseError as exc:
            raise PackageProblem(f"{where}: {folder}/{CONFIG} does not parse as a Triton model "
                                 f"config: {exc}") from None
        if not files.versions:
            raise PackageProblem(
                f"{where}: model '{folder}' has no version folder: Triton loads the numbered "
                f"sub-folders ({folder}/1/ ...; an ensemble's may be empty) and fails without one")
        configs[folder] = config
    ensembles = {n for n, c in configs.items() if c.platform == "ensemble"}
    for name in sorted(ensembles):
        for step in configs[name].ensemble_scheduling.step:
            if step.model_name not in configs:
                raise PackageProblem(
                    f"{where}: ensemble '{name}' has a step '{step.model_name}' that is not in "
                    f"the tarball (it has: {', '.join(sorted(configs))}); add that model's folder")
    used = {s.model_name for n in ensembles for s in configs[n].ensemble_scheduling.step}
    top = sorted(ensembles - used)
    if len(top) > 1 or (not top and len(configs) > 1):
        several = ", ".join(top or sorted(configs))
        raise PackageProblem(
            f"{where}: {len(top or configs)} models could serve the TargetModel ({several}); "
            "SageMaker's Triton would pick one arbitrarily. Package one model, or one ensemble "
            "with its steps, per tarball")
    entry = top[0] if top else next(iter(configs))
    for folder, config in configs.items():
        if config.name and config.name != folder and folder != entry:
            raise PackageProblem(
                f"{where}: model folder '{folder}' says name \"{config.name}\" in its "
                f"{CONFIG}; Triton requires the two to match")
