"""``mme loadtest --trace FILE [--speed N]``: a recording or data capture replayed
(``harness.loadtest.replay``), against ``--url`` or an emulator started for ``--model-data``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _problem(args: argparse.Namespace) -> str | None:
    if args.aws:
        return ("--trace replays over the emulator's runtime path: give --url URL or "
                "--model-data STORE, not --aws")
    if not (args.url or args.model_data):
        return "--trace needs the endpoint: --url URL or --model-data STORE"
    if args.speed <= 0:
        return f"--speed must be above 0, not {args.speed:g}"
    if args.master or args.processes or args.web or args.write_spec:
        return ("--trace sends from this one process, open loop: leave out --master, "
                "--processes, --web and --write-spec")
    if args.body and not args.content_type:
        return "--body needs --content-type"
    return None


def _fallback(args: argparse.Namespace, store: Path | None) -> Any:
    """What a call without a body of its own sends: --body / --inputs, else random tensors
    from its model's config.pbtxt in the store (None where none can be made)."""
    from harness.loadtest.session import auto_request, npz_request

    if args.body:
        fixed = (args.body.read_bytes(), args.content_type)
        return lambda call: fixed
    if args.inputs:
        request = npz_request(args.inputs, binary=args.binary)
        return lambda call: (request.body, request.content_type)
    if store is None:
        return None
    made: dict[str, tuple[bytes, str] | None] = {}

    def from_store(call: Any) -> tuple[bytes, str] | None:
        target = call.target_model
        if target is None:
            return None
        if target not in made:
            tarball = store / target
            if tarball.is_file():
                request = auto_request(tarball, binary=args.binary,
                                       batch_size=args.batch_size)
                made[target] = (request.body, request.content_type)
            else:
                made[target] = None
        return made[target]

    return from_store


def run_trace(args: argparse.Namespace) -> int:
    """0: every call replayed and the per-model counts match the trace; 1: they do not (or
    calls failed to leave); 2: a bad trace or flags (nothing sent); 130: interrupted."""
    from harness.loadtest.aiperf_export import from_replay, write_export
    from harness.loadtest.replay import bodies_for, replay, summarize, to_markdown, write_summary
    from harness.loadtest.session import emulator, emulator_settings
    from harness.loadtest.trace import TraceError, read_trace
    from harness.model_store import StoreError, prepare_store

    problem = _problem(args)
    if problem:
        print(f"mme loadtest: {problem}", file=sys.stderr)
        return 2
    out = args.out or Path(f"mme-replay-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        trace = read_trace(args.trace)
        with tempfile.TemporaryDirectory(prefix="mme-replay-") as tmp:
            work = Path(tmp)
            store = prepare_store(args.model_data, work / "store") if args.model_data else None
            bodies = bodies_for(trace, _fallback(args, store))
            print(f"mme loadtest: {len(trace.calls)} calls ({trace.kind}) over "
                  f"{trace.span_s:.1f} s from {len(trace.sources)} file(s); replaying at speed "
                  f"{args.speed:g}", file=sys.stderr)
            started_at = time.time()
            if store is not None:
                name = args.endpoint_name or "local"
                with emulator(store, work, emulator_settings(args), name) as url:
                    started_at = time.time()
                    sent = asyncio.run(replay(url, trace, bodies, speed=args.speed,
                                              endpoint=name))
            else:
                sent = asyncio.run(replay(args.url.rstrip("/"), trace, bodies,
                                          speed=args.speed, endpoint=args.endpoint_name))
    except (TraceError, StoreError) as exc:
        print(f"mme loadtest: {exc}; nothing was sent", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mme loadtest: interrupted; no report", file=sys.stderr)
        return 130
    summary = summarize(trace, sent, args.speed)
    paths = write_summary(summary, out)
    if args.report_format == "aiperf":
        paths["aiperf"] = write_export(from_replay(sent, summary, started_at), out)
    print(to_markdown(summary))
    print("report: " + ", ".join(str(p) for p in paths.values()))
    return 0 if summary["counts_match"] else 1
