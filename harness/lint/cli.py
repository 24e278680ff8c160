"""``mme lint`` and ``mme bench lint``."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emulator.triton.releases import DEFAULT_RELEASE, EMBEDDED, UnknownImage


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "lint", help="what SageMaker's Triton would refuse in a tarball or model repository, "
                     "found without a Triton (docs/lint.md)",
        description="Check tarballs, model repositories or a store folder of them for what "
                    "SageMaker's Triton would refuse. Exit 0: no findings; 1: findings; 2: "
                    "something could not be read.")
    p.add_argument("paths", nargs="+", metavar="TARBALL|REPO",
                   help="a .tar.gz, a model repository or model folder, or a folder of them")
    p.add_argument("--instance-type", default=None,
                   help="the endpoint's InstanceType, e.g. ml.g5.xlarge: KIND_GPU and `gpus` "
                        "are checked against its GPUs")
    p.add_argument("--image", default=None,
                   help="the Triton release targeted: sagemaker-tritonserver:<release>-py3 (any "
                        f"registry), nvcr.io/nvidia/tritonserver:<release>-py3 or <release>; "
                        f"default {DEFAULT_RELEASE} (mme deploy's)")
    p.add_argument("--measure", action="store_true",
                   help="also load each model once on the embedded Triton (as `mme plan` does) "
                        "and set its measured memory against --instance-type's (needs it)")
    p.add_argument("--format", default="text", choices=("text", "json", "sarif", "junit"))
    p.add_argument("-o", "--output", default=None, help="write the report here (default stdout)")
    p.set_defaults(func=run_lint)


def run_lint(args: argparse.Namespace) -> int:
    from harness.lint import lint
    from harness.lint.releases import skew
    from harness.lint.report import render

    if args.measure and not args.instance_type:
        print("mme lint: --measure needs --instance-type (the memory it is set against), e.g. "
              "--instance-type ml.m5.xlarge", file=sys.stderr)
        return 2
    try:
        report = lint([Path(p) for p in args.paths], instance_type=args.instance_type,
                      image=args.image)
    except UnknownImage as exc:
        print(f"mme lint: {exc}", file=sys.stderr)
        return 2
    if args.measure and report.sources and not report.unreadable:
        from harness.lint.measure import MIB, measure_sources

        found, memory = measure_sources(report.sources, args.instance_type)
        report.findings += found
        for target, size in sorted(memory.items()):
            print(f"mme lint: {target}: {size / MIB:.0f} MiB measured", file=sys.stderr)
    differences = skew(report.release)
    if differences:  # once, on stderr: the report itself stays machine-readable
        print(f"mme lint: the embedded Triton {EMBEDDED.triton} (`mme serve`) differs from "
              f"{report.release.image} in what is documented:", file=sys.stderr)
        for line in differences:
            print(f"  - {line}", file=sys.stderr)
    rendered = render(report, args.format, differences)
    if args.output:
        Path(args.output).write_text(rendered)
        if args.format != "text":  # the log still says what was found
            from harness.lint.report import text

            sys.stderr.write(text(report, differences))
    else:
        sys.stdout.write(rendered)
    return report.exit_code


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "lint", help="mme lint's time on a 100 MB ensemble tarball and on a folder of 1,000 "
                     "small tarballs")
    p.add_argument("--size-mb", type=int, default=100)
    p.add_argument("--count", type=int, default=1000)
    p.set_defaults(func=run_bench)


def run_bench(args: Any) -> int:
    from ensembles.packaging import package
    from harness.lint import lint
    from harness.testmodels import write_scale_model, write_two_step_ensemble

    with tempfile.TemporaryDirectory(prefix="mme-bench-lint-") as tmp:
        work = Path(tmp)
        repo = work / "chain"
        write_scale_model(repo, "preprocess")
        write_scale_model(repo, "postprocess")
        write_two_step_ensemble(repo / "ensemble")
        with open(repo / "postprocess" / "1" / "weights.bin", "wb") as handle:
            for _ in range(args.size_mb):  # incompressible: the tarball is as large
                handle.write(_random_mb())
        big = package(repo, work / "chain.tar.gz", layout="flat")
        small_dir = work / "store"
        small_dir.mkdir()
        single = work / "single"
        write_scale_model(single, "scale")
        first = package(single / "scale", small_dir / "m0000.tar.gz", layout="folder")
        for number in range(1, args.count):
            (small_dir / f"m{number:04d}.tar.gz").write_bytes(first.read_bytes())
        rows = []
        for label, path, target in (
                (f"one {big.stat().st_size / 1e6:.0f} MB ensemble tarball", big, 3.0),
                (f"a folder of {args.count} small tarballs", small_dir, 60.0)):
            start = time.perf_counter()
            report = lint([path], instance_type="ml.g5.xlarge")
            took = time.perf_counter() - start
            rows.append((label, took, target, len(report.sources), report.exit_code))
    print(f"{'mme lint on':<40} {'seconds':>8} {'target':>7}  sources  exit")
    for label, took, target, sources, code in rows:
        print(f"{label:<40} {took:8.2f} {'< ' + str(int(target)):>7}  {sources:>7}  {code:>4}")
    return 0


def _random_mb() -> bytes:
    import os

    return os.urandom(1 << 20)
