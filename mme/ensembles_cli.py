"""``mme build``, ``mme package`` and ``mme bench ensemble``.

    mme build --list
    mme build text_embedding --variant onnx --output build/text   # repo + build/text.tar.gz
    mme package build/text -o model_text.tar.gz [--layout flat|folder]
    mme bench ensemble --concurrency 8 --requests 200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ensembles import catalogue
from ensembles.packaging import LAYOUTS, package
from ensembles.quiet import exporter_output_hidden


def _mib(size: int | None) -> str:
    """A size people read: ``812 bytes``, ``3.4 KiB``, ``79.3 MiB``."""
    if size is None:
        return "-"
    if size < 2**10:
        return f"{size} bytes"
    if size < 2**20:
        return f"{size / 2**10:.1f} KiB"
    return f"{size / 2**20:.1f} MiB"


def run_build(args: argparse.Namespace) -> int:
    if args.list or not args.ensemble:
        sys.stdout.write(catalogue.describe())
        return 0 if args.list else 2
    if not args.output:
        sys.stderr.write("mme build: --output DIR is required\n")
        return 2
    output = Path(args.output)
    tarball = Path(args.tarball) if args.tarball else output.with_name(output.name + ".tar.gz")
    options: dict[str, object] = {}
    if args.dynamic_batching:
        options["dynamic_batching"] = True
    if args.instance_count != 1:
        options["instance_count"] = args.instance_count
    if not args.verbose:
        print(f"building {args.ensemble} (the exporters' output is hidden; --verbose shows it)",
              flush=True)
    try:
        with exporter_output_hidden(not args.verbose):
            result = catalogue.build(args.ensemble, output, args.variant,
                                    None if args.no_tarball else tarball, args.layout, **options)
    except (KeyError, ValueError, RuntimeError) as exc:
        sys.stderr.write(f"mme build: {exc}\n")
        return 1
    print(f"built {result.ensemble} ({result.variant}) in {result.seconds:.1f} s")
    print(f"  repository {result.repository} ({_mib(result.repository_bytes)})")
    if result.tarball:
        print(f"  tarball    {result.tarball} ({_mib(result.tarball_bytes)}, layout "
              f"{args.layout}); upload it under the endpoint's ModelDataUrl prefix and invoke "
              f"with TargetModel={result.tarball.name}")
    return 0


def run_package(args: argparse.Namespace) -> int:
    from harness.package_checks import PackageProblem, check_folder

    repo = Path(args.repo_dir)
    if not repo.is_dir():
        sys.stderr.write(f"mme package: {repo} is not a folder (give a model repository: a "
                         "folder of <model>/config.pbtxt)\n")
        return 2
    try:  # what SageMaker's Triton would refuse, before anything is written
        check_folder(repo, args.layout)
    except PackageProblem as exc:
        sys.stderr.write(f"mme package: {exc}\n")
        return 2
    try:
        tarball = package(repo, Path(args.output), args.layout)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"mme package: {exc}\n")
        return 1
    print(f"wrote {tarball} ({_mib(tarball.stat().st_size)}, layout {args.layout})")
    return 0


def run_bench_ensemble(args: argparse.Namespace) -> int:
    from ensembles import bench

    results = bench.run(Path(args.work_dir) if args.work_dir else None,
                        concurrency=args.concurrency, requests=args.requests,
                        quiet=not args.verbose)
    print(bench.table(results, args.concurrency))
    return 0 if all(r.errors == 0 for r in results) else 1


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench ensemble``."""
    p = commands.add_parser(
        "ensemble", help="the text ensemble through the emulator: dynamic batching and "
                         "instance count compared at a fixed concurrency")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=200, help="measured calls per configuration")
    p.add_argument("--work-dir", help="where to build (a temporary folder by default)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show the exporters' own output while the ensemble builds (hidden by "
                        "default, and shown anyway when the build fails)")
    p.set_defaults(func=run_bench_ensemble)


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "build", help="build a bundled ensemble's model repository and tarball",
        description="Write a Triton model repository for a bundled ensemble and package it "
                    "as the .tar.gz SageMaker expects. `mme build --list` shows the ensembles.")
    p.add_argument("ensemble", nargs="?", help="text_embedding or image_classification")
    p.add_argument("--list", action="store_true", help="list ensembles, inputs and outputs")
    p.add_argument("--variant", help="e.g. onnx (default), tensorrt, python-torch")
    p.add_argument("--output", "-o", help="model repository folder to write")
    p.add_argument("--tarball", help="tarball path (default: <output>.tar.gz)")
    p.add_argument("--no-tarball", action="store_true", help="only write the repository")
    p.add_argument("--layout", choices=LAYOUTS, default="flat",
                   help="tar layout: flat = `tar -C repo .` (ensembles); folder = one top folder")
    p.add_argument("--dynamic-batching", action="store_true",
                   help="add `dynamic_batching {}` to the step models")
    p.add_argument("--instance-count", type=int, default=1, help="instances per step model")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show the exporters' own output (torch.onnx, onnxscript, warnings); "
                        "hidden by default, and shown anyway when the build fails")
    p.set_defaults(func=run_build)

    p = subparsers.add_parser(
        "package", help="package a Triton model repository as a SageMaker .tar.gz",
        description="flat (default): entries ./<model>/..., as `tar -C repo -czf x.tar.gz .`; "
                    "needed for ensembles. folder: one top-level folder <repo-name>/..., as "
                    "`tar -czf x.tar.gz model/`; fine for a single model.")
    p.add_argument("repo_dir")
    p.add_argument("--output", "-o", required=True, help="the .tar.gz to write")
    p.add_argument("--layout", choices=LAYOUTS, default="flat")
    p.set_defaults(func=run_package)
