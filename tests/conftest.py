"""Fixtures and hooks only; helpers live in the ``tests/*_support.py`` modules.

The emulator with a real embedded (or docker) Triton, a real HTTP S3 server, boto3.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from xdist.scheduler import LoadScopeScheduling

from emulator.processes import free_port
from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.client_support import DUMMY_CREDENTIALS, S3

# Fixtures defined in a helper module, made visible to every test module.
from tests.docker_support import docker_client, triton_cpu_image  # noqa: F401
from tests.launcher_support import DOCKER, LAUNCHER_PARAMS, TritonLauncher
from tests.support import SUITE_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-docker", action="store_true",
                     help="skip the docker suites (refused with CI=true: CI runs them)")


# The Ctrl-C tests send SIGINT to the commands they start. A suite started in the background of
# a non-interactive shell (``make test &``) inherits SIGINT ignored, and so would every command
# it starts: they must see Ctrl-C as a terminal sends it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TESTS = Path(__file__).parent
KINDS = ("unit", "integration")

# Every command a test starts reads the suite's settings (tests/support.py SUITE_ENV).
os.environ.update(SUITE_ENV)


class ModuleScopes(LoadScopeScheduling):
    """``--dist loadscope --no-loadscope-reorder`` (make test) by module, in the collection's
    order (``slow_scopes_first``): a module's tests share one worker, so its
    module-scoped emulator starts once; a module's docker half is a scope of its own (it shares
    nothing with the embedded half), so the two halves of a module parametrised by
    ``triton_launcher`` can run side by side.

    Scopes are read from node ids alone, as xdist's schedulers read them (xdist's ``loadgroup``
    marks cannot be relied on: it renames nodes by an attribute newer pytest no longer reads, and
    then spreads a module's tests over every worker, each setting its fixtures up again).
    """

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def scope_of(nodeid: str) -> str:
    """The test's module, or its module's docker half."""
    module, _, rest = nodeid.partition("::")
    params = rest[rest.find("[") + 1:rest.rfind("]")] if rest.endswith("]") else ""
    return f"{module}[{DOCKER}]" if DOCKER in params.split("-") else module


def slow_scopes_first(items: list[pytest.Item]) -> None:
    """Order the modules (their tests kept together, in order) so that the slow kinds start
    first and the quick ones fill the workers' last minutes: docker halves, then the integration
    modules marked ``starts_first`` (many tests, minutes on one worker: the docs walks), then
    the other integration modules, fewest tests first (a module of one or two tests is one long
    scenario: a load test, a notebook), then the unit tests, most tests first. Started last, one
    90-second module would hold the whole run while the other workers idle."""
    scopes: dict[str, list[pytest.Item]] = {}
    for item in items:
        scopes.setdefault(scope_of(item.nodeid), []).append(item)

    def rank(scope: str) -> tuple[int, bool, int]:
        kind = 0 if scope.endswith(f"[{DOCKER}]") else 1 if "/integration/" in scope else 2
        marked = scopes[scope][0].get_closest_marker("starts_first") is not None
        tests = len(scopes[scope])
        # A unit module's seconds grow with its tests: the largest first, the smallest last.
        return kind, not marked, -tests if kind == 2 else tests

    items[:] = [item for scope in sorted(scopes, key=rank) for item in scopes[scope]]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleScopes | None:
    return ModuleScopes(config, log) if config.getvalue("dist") == "loadscope" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # the folder says what a test is: -m unit / -m integration select it
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if folder in KINDS:
            item.add_marker(folder)
    slow_scopes_first(items)
    if not config.getoption("--no-docker"):
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise pytest.UsageError("--no-docker is refused with CI=true: CI runs the docker suites")
    skip = pytest.mark.skip(reason="--no-docker given: docker suites skipped on request")
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(skip)


# Seconds spent per module (setup, call and teardown of its tests, summed over workers), the
# CPU-seconds it used, when its first test started and its last ended (epoch s), and the worker
# that ran it.
_MODULE_SECONDS: dict[str, float] = defaultdict(float)
_MODULE_CPU: dict[str, float] = defaultdict(float)
_MODULE_SPANS: dict[str, tuple[float, float]] = {}
_MODULE_WORKERS: dict[str, str] = {}
DURATIONS_FILE = "test-durations.txt"


_CPU_MARK = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    """This process's CPU-seconds and those of its children that have ended and been waited for:
    the servers' Tritons with their Python stubs, the ``mme`` commands. A docker container's
    processes are not counted, nor a stop that ends while the next module runs."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_MARK] = _cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report carries the CPU-seconds the phase used (as a user property, which
    xdist sends to the controller with the report)."""
    report = yield
    now = _cpu_seconds()
    report.user_properties.append(("cpu_s", now - item.stash.get(_CPU_MARK, now)))
    item.stash[_CPU_MARK] = now
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    half = " [docker]" if "docker" in report.keywords else ""
    module = report.nodeid.split("::")[0] + half
    _MODULE_SECONDS[module] += report.duration
    _MODULE_CPU[module] += float(dict(report.user_properties).get("cpu_s", 0.0))
    first, last = _MODULE_SPANS.get(module, (report.start, report.stop))
    _MODULE_SPANS[module] = (min(first, report.start), max(last, report.stop))
    gateway = getattr(getattr(report, "node", None), "gateway", None)  # set by xdist
    if gateway is not None:
        _MODULE_WORKERS[module] = gateway.id


def machine_gauge(runs: int = 3) -> float:
    """CPU-seconds this machine takes to start Python and import numpy (the median of ``runs``):
    what the suite does hundreds of times (each Triton stub, each command). It tells a slow day
    of a shared VM from a slower suite: on one 2-vCPU VM, a stub took about 0.1 on a quick day
    and 0.4 on a slow one, while a pure-Python loop ran just as fast on the slow day."""
    spent = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import numpy"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return sorted(spent)[len(spent) // 2]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Where the suite's time goes, per module: the slowest in the log, all in a file, with
    when each module ran (seconds from the first test's start) and on which worker, so that
    the module holding the run's end shows too."""
    if hasattr(config, "workerinput") or not _MODULE_SECONDS:
        return  # an xdist worker: the controller sums every worker's reports
    ranked = sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1])
    total = sum(seconds for _, seconds in ranked)
    began = min(first for first, _ in _MODULE_SPANS.values())

    cpu = sum(_MODULE_CPU.values())

    def line(module: str, seconds: float) -> str:
        first, last = _MODULE_SPANS[module]
        return (f"{seconds:8.1f} s  {100 * seconds / total:5.1f} %  {_MODULE_CPU[module]:7.1f}  "
                f"{first - began:5.0f}-{last - began:4.0f} s  "
                f"{_MODULE_WORKERS.get(module, '-'):>4}  {module}")

    lines = [line(module, seconds) for module, seconds in ranked]
    # The record and the machine's gauge (three Python starts) are for a run of the whole suite
    # (no file or folder named, as make test runs it): a run of a few files keeps the record.
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    gauge = (f"the machine: {machine_gauge():.2f} CPU-seconds to start Python and import numpy, "
             "measured after the run") if whole else "a part of the suite: the record is kept"
    if whole:
        Path(config.rootpath, DURATIONS_FILE).write_text(
            f"{total:8.1f} s  100.0 %  {cpu:7.1f}  {'ran (s from the start)':>13}  worker  "
            "all modules (test-seconds summed over workers; CPU-seconds of the worker and of "
            f"the processes it waited for); {gauge}\n" + "\n".join(lines) + "\n")
    where = f"every module in {DURATIONS_FILE}" if whole else "the whole suite writes them all"
    terminalreporter.write_sep("=", f"slowest modules ({total:.0f} test-seconds and {cpu:.0f} "
                                    f"CPU-seconds in all; {where})")
    terminalreporter.write_line(gauge)
    for text in lines[:15]:
        terminalreporter.write_line(text)
    terminalreporter.write_sep("-", "the modules that ended last")
    for module in sorted(_MODULE_SPANS, key=lambda m: -_MODULE_SPANS[m][1])[:5]:
        terminalreporter.write_line(line(module, _MODULE_SECONDS[module]))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module", params=LAUNCHER_PARAMS)
def triton_launcher(request: pytest.FixtureRequest) -> TritonLauncher:
    """Each launcher in turn (embedded, then docker): a module requesting it runs twice."""
    if request.param == DOCKER:
        image = request.getfixturevalue("triton_cpu_image")
        return TritonLauncher(DOCKER, {"launcher": "docker", "image": image},
                              request.getfixturevalue("docker_client"))
    return TritonLauncher(request.param)


@pytest.fixture
def start_emulator(tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[Callable[..., EmulatorServer]]:
    """Start an emulator (own Triton, own cache dir); every one started is stopped at the end.

    On the embedded launcher, or on each launcher in turn when the test also requests
    ``triton_launcher`` (tmp_path is then mounted into the container: gate files live there).
    """
    launcher = (request.getfixturevalue("triton_launcher")
                if "triton_launcher" in request.fixturenames else TritonLauncher("embedded"))
    servers: list[EmulatorServer] = []

    def start(**overrides: Any) -> EmulatorServer:
        overrides.setdefault("cache_dir", tmp_path / f"cache{len(servers)}")
        overrides.setdefault("port", 0)
        settings = launcher.overrides(mounts=[tmp_path], **overrides)
        server = EmulatorServer(Settings.from_env(env=SUITE_ENV, **settings)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        # Stopped while the next test runs: a Triton takes 2-3 s to unload its Python models
        # and exit, time spent waiting, not computing. Every stop ends before the module does.
        stopping = threading.Thread(target=server.stop, name=f"stop {server.url}")
        stopping.start()
        _STOPPING.append(stopping)


# Emulators of finished tests still stopping (``start_emulator``).
_STOPPING: list[threading.Thread] = []


@pytest.fixture(scope="module", autouse=True)
def emulators_stopped_by_module_end() -> Iterator[None]:
    """No emulator (nor its Triton or containers) outlives the module that started it."""
    yield
    while _STOPPING:
        stopping = _STOPPING.pop()
        stopping.join(timeout=120)
        assert not stopping.is_alive(), f"{stopping.name} did not finish within 120 s"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3]:
    """moto in server mode: a real HTTP S3 endpoint on a free loopback port."""
    from moto.server import ThreadedMotoServer

    for key, value in DUMMY_CREDENTIALS.items():
        os.environ.setdefault(key.upper() if key != "region_name" else "AWS_DEFAULT_REGION", value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    yield S3(url, boto3.client("s3", endpoint_url=url, **DUMMY_CREDENTIALS))
    server.stop()
