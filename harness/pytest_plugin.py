"""pytest plugin: a local SageMaker multi-model endpoint for a team's own test suite.

Loaded through the ``pytest11`` entry point ``mme``. Fixtures:

- ``mme_model_store`` (session): what the endpoint serves. From ``--mme-model-store`` or the ini
  option ``mme_model_store``: a folder of ``.tar.gz``, model folders or model repositories (each
  ``NAME`` is the TargetModel ``NAME.tar.gz``; ``harness.model_store`` has the rules), or such
  things themselves; override the fixture to build one in code.
- ``mme_server`` (session): the emulator, with the embedded Triton, on a free port; stopped at
  the end of the session. It runs as a child process (``python -m mme serve``): the test
  process and the endpoint do not share a GIL (timings stay honest), a crashing model cannot
  take pytest down, and it is exactly what users run by hand. ``--mme-inprocess`` runs it in a
  thread instead (breakpoints in the emulator); ``--mme-url`` uses one already running.
- ``mme_endpoint`` (session): name, URL, store, TargetModel digests, ``invoke`` and ``metrics``.
- ``sagemaker_runtime`` (session): a boto3 ``sagemaker-runtime`` client bound to the endpoint.
- ``invoke``: ``invoke(target_model, {"INPUT": array}, outputs=None, binary=True)`` returns
  ``{output name: numpy array}``.
- ``assert_matches_golden``: ``assert_matches_golden(name, outputs, rtol=..., atol=...)`` against
  ``goldens/<test module>/<name>.npz`` beside the test; ``--mme-update-goldens`` rewrites them.
- ``mme_faults``: ``harness.faults.FaultRules`` on the session's emulator: ``add(fault,
  match=..., count=...)`` makes chosen calls fail or slow down (docs/faults.md); every rule it
  added is removed after the test, pass or fail.
- ``mme_time``: ``harness.emulated_time.EmulatedTime`` on the session's emulator: ``advance(s)``
  moves its emulated clock on, ``transition(...)`` says how a Creating, Updating or Deleting
  goes (docs/faults.md); its transition rules are removed after the test, pass or fail.
- ``mme_clean_server``: the session's emulator (``MmeServer``), reset to empty before the test
  (``POST /_emulator/reset``: every endpoint, config, model, alarm, scaling target and policy,
  metric and fault rule created before is gone; the model store's endpoint is started again,
  none of its models loaded): each test starts from a fresh server at the cost of one server
  start per session. ``harness.server_state.ServerState`` saves and restores snapshots.

For a suite checked with mypy, the fixtures' types are ``Invoke`` and ``AssertMatchesGolden``
(this module) and ``MmeEndpoint`` (``harness.live_endpoint``); the example suite uses them.

``--mme-target=aws --mme-endpoint-name NAME`` runs the same tests against a real endpoint
(credentials and region from the default boto3 session).

Golden cases (one test per model x golden) and budgets against the base branch are the CI part,
``harness/ci_plugin.py`` (entry point ``mme-ci``).

This module is imported by every pytest run in an environment where the package is installed,
so it imports nothing heavy at module level.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    import numpy.typing as npt

    from harness.live_endpoint import MmeEndpoint


class Invoke(Protocol):
    """The ``invoke`` fixture: encode the inputs, call the endpoint, decode the outputs."""

    def __call__(self, target_model: str | None, inputs: Mapping[str, Any],
                 outputs: Sequence[str] | None = None, **kwargs: Any) -> dict[str, Any]: ...


class AssertMatchesGolden(Protocol):
    """The ``assert_matches_golden`` fixture; returns "recorded", "updated" or "matched"."""

    def __call__(self, name: str, outputs: Mapping[str, npt.NDArray[Any]], *,
                 rtol: float = 1e-5, atol: float = 1e-6, model: str | None = None) -> str: ...

T = TypeVar("T")

_LAST_TARGET_MODEL = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mme", "SageMaker multi-model endpoint emulator")
    group.addoption(
        "--mme-target",
        choices=("local", "aws"),
        default=None,
        help="run the suite against the emulator (local, default) or a real "
        "SageMaker endpoint (aws, needs --mme-endpoint-name)",
    )
    group.addoption(
        "--mme-endpoint-name",
        default=None,
        help="endpoint name: the real endpoint for --mme-target=aws; the "
        "emulator's endpoint name otherwise (default: local)",
    )
    group.addoption(
        "--mme-launcher",
        choices=("embedded", "docker", "external"),
        default=None,
        help="how the emulator runs Triton (default: embedded, or MME_LAUNCHER)",
    )
    group.addoption("--mme-image", default=None, help="Triton image for --mme-launcher=docker")
    group.addoption(
        "--mme-model-store",
        default=None,
        help="model store: a folder of .tar.gz, model folders or model repositories (each "
        "NAME served as NAME.tar.gz), or one of those (several separated by commas)",
    )
    group.addoption(
        "--mme-url",
        default=None,
        help="use an emulator already running at this URL instead of starting one",
    )
    group.addoption(
        "--mme-inprocess",
        action="store_true",
        default=False,
        help="run the emulator in a thread of the test process (for debugging)",
    )
    group.addoption(
        "--mme-update-goldens",
        action="store_true",
        default=False,
        help="(re)record golden snapshots instead of comparing with them",
    )
    group.addoption(
        "--mme-lint",
        choices=("warn", "error", "off"),
        default="warn",
        help="check the model store with `mme lint`'s rules before serving it: warn (list the "
        "findings in the summary, default), error (fail the tests that use the endpoint on an "
        "error finding) or off",
    )
    group.addoption(
        "--mme-instance-type",
        default=None,
        help="the InstanceType the store is linted for (KIND_GPU and gpus against its GPUs)",
    )
    parser.addini(
        "mme_model_store", "model store(s) for the mme_endpoint fixture", type="paths", default=[]
    )
    parser.addini("mme_target", "default for --mme-target", default="local")


def _target(config: pytest.Config) -> str:
    return str(config.getoption("mme_target") or config.getini("mme_target") or "local")


def pytest_configure(config: pytest.Config) -> None:
    if _target(config) != "aws":
        launcher = config.getoption("mme_launcher") or os.environ.get("MME_LAUNCHER")
        image = config.getoption("mme_image") or os.environ.get("MME_IMAGE")
        if launcher == "docker" and not image and not config.getoption("mme_url"):
            raise pytest.UsageError(
                "--mme-launcher docker needs the Triton image to run: --mme-image IMAGE (or "
                "MME_IMAGE), e.g. nvcr.io/nvidia/tritonserver:24.09-py3 or the SageMaker "
                "Triton image your endpoint uses"
            )
        return
    # Fail the whole session up front: a skip would turn a misconfigured pre-merge job green.
    if not config.getoption("mme_endpoint_name"):
        raise pytest.UsageError(
            "--mme-target=aws needs --mme-endpoint-name NAME (the real "
            "multi-model endpoint to test)"
        )
    import boto3

    session = boto3.Session()
    if session.get_credentials() is None:
        raise pytest.UsageError(
            "--mme-target=aws: boto3 found no AWS credentials (set AWS_PROFILE, "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run where a role is attached)"
        )
    if not session.region_name:
        raise pytest.UsageError(
            "--mme-target=aws: no AWS region (set AWS_REGION or "
            "AWS_DEFAULT_REGION, or a region in the profile)"
        )


def pytest_report_header(config: pytest.Config) -> str | None:
    target = _target(config)
    if target == "aws":
        return f"mme: target aws, endpoint {config.getoption('mme_endpoint_name')}"
    if config.getoption("mme_url"):
        return f"mme: target local, emulator at {config.getoption('mme_url')}"
    return None


@pytest.fixture(scope="session")
def mme_model_store(pytestconfig: pytest.Config) -> Any:
    """The model store as configured (None if none is): override it to build one in code."""
    option = pytestconfig.getoption("mme_model_store")
    if option:
        return [Path(p.strip()) for p in str(option).split(",") if p.strip()]
    paths = pytestconfig.getini("mme_model_store")
    return list(paths) or None


@pytest.fixture(scope="session")
def _mme_store_dir(mme_model_store: Any, tmp_path_factory: pytest.TempPathFactory,
                   pytestconfig: pytest.Config) -> Path | None:
    if mme_model_store is None:
        return None
    from harness.model_store import StoreError, prepare_store

    try:
        store = prepare_store(mme_model_store, tmp_path_factory.mktemp("mme-store"))
    except StoreError as exc:
        message = f"mme model store: {exc}"
    else:
        message = _lint_store(store, pytestconfig)
        if not message:
            return store
    # Outside the except block, without a traceback: the message says what to fix.
    pytest.fail(message, pytrace=False)


def _endpoint_name(config: pytest.Config) -> str:
    from harness.live_endpoint import DEFAULT_ENDPOINT

    return str(config.getoption("mme_endpoint_name") or DEFAULT_ENDPOINT)


class MmeServer:
    """The running emulator: ``url``, the default ``endpoint_name``, the ``store`` it serves."""

    def __init__(
        self, url: str, endpoint_name: str, store: Path | None, log_path: Path | None
    ) -> None:
        self.url = url
        self.endpoint_name = endpoint_name
        self.store = store
        self.log_path = log_path


@pytest.fixture(scope="session")
def mme_server(
    pytestconfig: pytest.Config,
    _mme_store_dir: Path | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MmeServer]:
    if _target(pytestconfig) == "aws":
        pytest.skip("mme_server: --mme-target=aws tests a real endpoint, no emulator runs")
    name = _endpoint_name(pytestconfig)
    url = pytestconfig.getoption("mme_url")
    if url:
        yield MmeServer(str(url).rstrip("/"), name, _mme_store_dir, None)
        return
    settings = {
        "MME_ENDPOINT_NAME": name,
        "MME_CACHE_DIR": str(tmp_path_factory.mktemp("mme-cache")),
    }
    if _mme_store_dir is not None:
        settings["MME_MODEL_DATA"] = str(_mme_store_dir)
    if pytestconfig.getoption("mme_launcher"):
        settings["MME_LAUNCHER"] = str(pytestconfig.getoption("mme_launcher"))
    if pytestconfig.getoption("mme_image"):
        settings["MME_IMAGE"] = str(pytestconfig.getoption("mme_image"))
    if pytestconfig.getoption("mme_inprocess"):
        yield from _inprocess_server(settings, name, _mme_store_dir)
        return
    from harness.live_endpoint import EmulatorProcess, EmulatorStartError

    log_path = tmp_path_factory.mktemp("mme-log") / "emulator.log"
    process = EmulatorProcess(settings, log_path)
    try:
        process.start()
    except EmulatorStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield MmeServer(process.url, name, _mme_store_dir, log_path)
    finally:
        process.stop()


def _inprocess_server(
    settings: dict[str, str], name: str, store: Path | None
) -> Iterator[MmeServer]:
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    server = EmulatorServer(Settings.from_env(env={**os.environ, **settings}, port=0))
    with server:
        yield MmeServer(server.url, name, store, None)


@pytest.fixture(scope="session")
def mme_endpoint(
    pytestconfig: pytest.Config, _mme_store_dir: Path | None, request: pytest.FixtureRequest
) -> MmeEndpoint:
    from harness.live_endpoint import LOCAL_REGION, MmeEndpoint, aws_client, local_client
    from harness.model_store import store_digests

    digests = store_digests(_mme_store_dir) if _mme_store_dir is not None else {}
    if _target(pytestconfig) == "aws":
        client = aws_client()
        return MmeEndpoint(
            name=str(pytestconfig.getoption("mme_endpoint_name")),
            target="aws",
            region=client.meta.region_name,
            client=client,
            url=None,
            store=_mme_store_dir,
            digests=digests,
        )
    if _mme_store_dir is None and not pytestconfig.getoption("mme_url"):
        pytest.fail(
            "mme_endpoint: no model store. Pass --mme-model-store, set mme_model_store "
            "in the ini file, or override the mme_model_store fixture",
            pytrace=False,
        )
    server: MmeServer = request.getfixturevalue("mme_server")
    return MmeEndpoint(
        name=server.endpoint_name,
        target="local",
        region=LOCAL_REGION,
        client=local_client(server.url),
        url=server.url,
        store=_mme_store_dir,
        digests=digests,
    )


@pytest.fixture(scope="session")
def sagemaker_runtime(mme_endpoint: MmeEndpoint) -> Any:
    """boto3 ``sagemaker-runtime`` client for the endpoint under test (local or AWS)."""
    return mme_endpoint.client


def _local_server(pytestconfig: pytest.Config, request: pytest.FixtureRequest,
                  why: str) -> MmeServer:
    """The session's emulator for a fixture that acts on it; skipped (``why``) against AWS."""
    if _target(pytestconfig) == "aws":
        pytest.skip(f"{why}; --mme-target=aws is real")
    server: MmeServer = request.getfixturevalue("mme_server")
    return server


def _for_one_test(pytestconfig: pytest.Config, request: pytest.FixtureRequest, why: str,
                  make: Callable[[str], T], undo: Callable[[T], object]) -> Iterator[T]:
    """What ``make`` makes of the session's emulator (its URL) for one test; ``undo`` after it,
    pass or fail. Skipped (``why``) against AWS."""
    made = make(_local_server(pytestconfig, request, why).url)
    try:
        yield made
    finally:
        undo(made)


@pytest.fixture
def mme_faults(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Fault rules on the session's emulator for one test; removed after it, pass or fail."""
    from harness.faults import FaultRules

    yield from _for_one_test(pytestconfig, request, "mme_faults: faults are injected by the "
                             "emulator", FaultRules, FaultRules.remove_added)


@pytest.fixture
def mme_clean_server(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> MmeServer:
    """The session's emulator, reset to empty before the test (docs/testing.md)."""
    from harness.server_state import ServerState

    server = _local_server(pytestconfig, request, "mme_clean_server: a reset empties the "
                           "emulator")
    ServerState(server.url).reset()
    return server


@pytest.fixture
def mme_time(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The emulated clock and transition rules of the session's emulator for one test; its
    transition rules removed after it, pass or fail."""
    from harness.emulated_time import EmulatedTime

    yield from _for_one_test(pytestconfig, request, "mme_time: the emulated clock is the "
                             "emulator's", EmulatedTime, EmulatedTime.clear_transitions)


@pytest.fixture
def invoke(mme_endpoint: MmeEndpoint, request: pytest.FixtureRequest) -> Invoke:
    """``invoke(target_model, inputs, outputs=None, *, binary=True) -> {name: array}``."""

    def _invoke(
        target_model: str | None, inputs: Mapping[str, Any], outputs: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        if target_model is not None:
            # assert_matches_golden then knows which tarball's digest to record.
            request.node.stash[_LAST_TARGET_MODEL] = target_model
        return mme_endpoint.invoke(target_model, inputs, outputs, **kwargs)

    return _invoke


@pytest.fixture
def assert_matches_golden(
    request: pytest.FixtureRequest, pytestconfig: pytest.Config
) -> AssertMatchesGolden:
    """``assert_matches_golden(name, outputs, rtol=1e-5, atol=1e-6, model=None)``.

    ``model`` is the TargetModel whose tarball digest the snapshot records (by default the
    last one this test invoked); a mismatch under another digest is reported as *stale*.
    """
    from harness.golden import GoldenMismatch, check

    update = bool(pytestconfig.getoption("mme_update_goldens"))
    module = request.node.path
    folder = module.parent / "goldens" / module.stem

    def _assert(
        name: str, outputs: Mapping[str, npt.NDArray[Any]], *, rtol: float = 1e-5,
        atol: float = 1e-6, model: str | None = None,
    ) -> str:
        model = model or request.node.stash.get(_LAST_TARGET_MODEL, None)
        digest = None
        if model is not None and "mme_endpoint" in request.fixturenames:
            digest = request.getfixturevalue("mme_endpoint").digests.get(model)
        try:
            return check(
                folder / f"{name}.npz",
                outputs,
                rtol=rtol,
                atol=atol,
                update=update,
                model_digest=digest,
                model=model,
            )
        except GoldenMismatch as exc:
            message = str(exc)
        # Outside the except block: the message is the whole report, with no chained traceback.
        pytest.fail(message, pytrace=False)

    return _assert


_LINT_LINES = pytest.StashKey[list[str]]()


def _lint_store(store: Path, config: pytest.Config) -> str:
    """`mme lint`'s rules on the store as served (the one implementation); a message when
    --mme-lint error finds an error, else the findings are kept for the summary."""
    mode = config.getoption("mme_lint", default="warn")
    if mode == "off":
        return ""
    from emulator.triton.releases import UnknownImage, release_of
    from harness.lint import lint

    image = config.getoption("mme_image") or os.environ.get("MME_IMAGE")
    try:
        release_of(image)
    except UnknownImage:
        image = None  # an image of the user's own: linted against the default release
    instance_type = (config.getoption("mme_instance_type")
                     or os.environ.get("MME_INSTANCE_TYPE") or None)  # the endpoint's
    report = lint([store], instance_type=instance_type, image=image)
    lines = [f"{f.level} {f.rule.id} {f.rule.name}: {f.message}" for f in report.findings]
    lines += [f"could not read: {m}" for m in report.unreadable]
    config.stash[_LINT_LINES] = lines
    if mode == "error" and any(f.level == "error" for f in report.findings):
        return "mme lint found errors in the model store:\n" + "\n".join(lines)
    return ""


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_LINT_LINES, [])
    if lines:
        terminalreporter.section("mme lint (the model store)")
        for line in lines:
            terminalreporter.write_line(line)
    if config.getoption("mme_update_goldens", default=False):
        terminalreporter.write_line(
            "mme: golden snapshots were (re)recorded (--mme-update-goldens); review and commit them"
        )
