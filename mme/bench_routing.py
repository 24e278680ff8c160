"""``mme bench routing``: what choosing a serving unit costs per call, in this process.

PREFIX_AWARE (hash the body's first PrefixLength bytes, rendezvous over the members, the
ConcurrencyThreshold check) against the plain LEAST_OUTSTANDING_REQUESTS choice of the same
members, in the same run (``timeit``, best of three rounds). The members are stand-ins with an
id and a count of calls in flight, as the router sees instances and copies.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Member:
    id: str
    in_flight: int = 0


@dataclass(frozen=True)
class RoutingCost:
    prefix_aware_us: float
    least_outstanding_us: float


def measure(members: int = 3, calls: int = 20000, prefix_length: int = 1024) -> RoutingCost:
    """Microseconds per choice, PREFIX_AWARE and LEAST_OUTSTANDING_REQUESTS."""
    from emulator.contract.routing_config import PrefixAwareConfig
    from emulator.hosting.prefix_routing import PrefixAware
    from emulator.hosting.routing import LeastOutstandingRequests

    units = [_Member(f"i-{n}") for n in range(1, members + 1)]
    body = (b"You are a helpful assistant. " * (prefix_length // 29 + 1))[:prefix_length] \
        + b"What is the capital of France?"
    prefix = PrefixAware(PrefixAwareConfig(prefix_length, 4))
    least = LeastOutstandingRequests()

    def per_call(choice: Callable[[], object]) -> float:
        return min(timeit.repeat(choice, number=calls, repeat=3)) / calls * 1e6

    return RoutingCost(per_call(lambda: prefix.choose(units, body)),
                       per_call(lambda: least.choose(units)))


def run(args: argparse.Namespace) -> int:
    if args.members < 1 or args.calls < 1 or not 1024 <= args.prefix_length <= 65536:
        print("mme bench routing: --members and --calls must be 1 or more, --prefix-length "
              "1024 to 65536 (PrefixAwareRoutingConfig's range)")
        return 2
    cost = measure(args.members, args.calls, args.prefix_length)
    print(f"routing choice per call, {args.members} members, {args.prefix_length}-byte prefix, "
          f"best of 3 x {args.calls} calls:")
    print(f"  PREFIX_AWARE                {cost.prefix_aware_us:6.2f} µs")
    print(f"  LEAST_OUTSTANDING_REQUESTS  {cost.least_outstanding_us:6.2f} µs")
    return 0


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "routing", help="PREFIX_AWARE's choice of a unit per call vs LEAST_OUTSTANDING_REQUESTS")
    parser.add_argument("--members", type=int, default=3, help="instances or copies")
    parser.add_argument("--calls", type=int, default=20000, help="choices per round")
    parser.add_argument("--prefix-length", type=int, default=1024)
    parser.set_defaults(func=run)
