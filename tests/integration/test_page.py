"""The live page at ``/_emulator/``, driven in a real headless Chromium (Debian's ``chromium``)
while boto3 traffic runs: a model appears as loading, then loaded, then evicted when another
takes its place; errors show with their SageMaker code; a model's detail view has its history.

Loads are held at a gate file (the test model waits for it), so each state is observed by
condition, never by timing.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.page_support import CHROMIUM, FLAGS, chromium_cli
from tests.prometheus_support import get_json, get_text, scrape, value
from tests.support import package, scale_request, write_scale_model

WAIT_MS = 120_000  # a generous bound for slow CI machines; every wait ends on a condition


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        if _in_ci():  # CI installs it (tests/install-chromium.sh via make test): missing is a bug
            pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); "
                    "`make test` installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=FLAGS, viewport={"width": 1400, "height": 1000})
        try:
            yield context.new_page()
        finally:
            context.close()


def _invoke(rt: Any, target: str) -> None:
    rt.invoke_endpoint(EndpointName="local", TargetModel=target, Body=scale_request([1, 2, 3, 4]))


def _row(target: str, state: str | None = None) -> str:
    selector = f'tr.model[data-model="{target}"]'
    return selector + (f'[data-state="{state}"]' if state else "")


def test_page_shows_a_model_loading_then_loaded_then_evicted_while_traffic_runs(
        start_emulator, store: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
        browser_page: Any) -> None:
    gates = {name: tmp_path / f"gate-{name}" for name in ("a", "b")}
    for name, gate in gates.items():
        package(write_scale_model(tmp_path / name, name, 2.0, load_gate=str(gate)),
                store / f"{name}.tar.gz", "folder")
    server = start_emulator(model_data=str(store), max_loaded_models=1)
    rt = runtime_client(server.url)
    page = browser_page
    page.goto(f"{server.url}/_emulator/")
    page.wait_for_selector('#connection[data-connected="true"]', timeout=WAIT_MS)
    assert page.inner_text('[data-endpoint="local"] h3').startswith("local")

    # Traffic on a: its first request waits at the gate, so the page must show a loading.
    stop_a = threading.Event()
    sent_a: list[int] = []
    failures: list[BaseException] = []

    def traffic_on_a() -> None:
        try:
            while not stop_a.is_set():
                _invoke(rt, "a.tar.gz")
                sent_a.append(1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)

    sender = threading.Thread(target=traffic_on_a)
    sender.start()
    try:
        page.wait_for_selector(_row("a.tar.gz", "loading"), timeout=WAIT_MS)
        assert page.inner_text(_row("a.tar.gz") + " td.lru") == "0"  # reserved in the LRU
        gates["a"].touch()
        page.wait_for_selector(f'{_row("a.tar.gz", "loaded")}, {_row("a.tar.gz", "pinned")}',
                               timeout=WAIT_MS)
        # The summary follows the traffic that keeps running.
        page.wait_for_function("""() => Number(
            document.querySelector('[data-figure="invocations"]').textContent) >= 5""",
                               timeout=WAIT_MS)
        assert page.inner_text('[data-figure="hit-ratio"]').endswith("%")
    finally:
        stop_a.set()
        sender.join(timeout=120)
    assert not failures, failures
    assert len(sent_a) >= 5

    # b takes a's place (room for one model): a is evicted, b loads.
    b_sender = threading.Thread(target=_invoke, args=(rt, "b.tar.gz"))
    b_sender.start()
    try:
        page.wait_for_selector(_row("b.tar.gz", "loading"), timeout=WAIT_MS)
        # a is evicted for b (its unload may still be under way while b loads).
        evicted = page.wait_for_selector(
            f'{_row("a.tar.gz")}[data-evicted-for="b.tar.gz"]', timeout=WAIT_MS)
        assert evicted.get_attribute("data-state") in ("unloading", "on_disk")
        assert "evicted for b.tar.gz" in evicted.inner_text()
        page.wait_for_selector(
            '#events li[data-step="unloading"][data-model="a.tar.gz"][data-evicted="true"]',
            timeout=WAIT_MS)
        gates["b"].touch()
        page.wait_for_selector(_row("b.tar.gz", "loaded"), timeout=WAIT_MS)
        page.wait_for_selector(f'{_row("a.tar.gz", "on_disk")}[data-evicted-for="b.tar.gz"]',
                               timeout=WAIT_MS)
    finally:
        gates["b"].touch()
        b_sender.join(timeout=120)

    # The LRU order on the page is the manager's: b loaded (position 0), a only on disk.
    assert page.inner_text(_row("b.tar.gz") + " td.lru") == "0"
    assert page.inner_text(_row("a.tar.gz") + " td.lru") == "–"

    # An error shows with the SageMaker code boto3 got.
    with pytest.raises(ClientError) as excinfo:
        _invoke(rt, "absent.tar.gz")
    assert excinfo.value.response["Error"]["Code"] == "ValidationError"
    error_row = page.wait_for_selector('#errors tr[data-code="ValidationError"]', timeout=WAIT_MS)
    assert "absent.tar.gz" in error_row.inner_text()

    # The timeline counts the two loads and the unload.
    page.wait_for_function("""() => /2 loads, 1 unloads/.test(
        document.getElementById('timeline-caption').textContent)""", timeout=WAIT_MS)

    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    if os.environ.get("MME_PAGE_SCREENSHOT"):  # how docs/page.png is made
        shutil.copy(tmp_path / "page.png", os.environ["MME_PAGE_SCREENSHOT"])

    # The detail view of a: its state and its history, eviction included.
    page.click(_row("a.tar.gz"))
    page.wait_for_selector("#detail:not([hidden])", timeout=WAIT_MS)
    assert page.inner_text("#detail-title") == "a.tar.gz"
    history = page.inner_text("#detail-events")
    assert "evicted" in history and "room for b.tar.gz" in history and "loaded" in history
    assert "on disk" in page.inner_text("#detail-fields")



# The "loaded" badge's colour (style.css .state-loaded): only a painted model row has it.
LOADED_BADGE = (0xD8, 0xF1, 0xE1)


def test_a_headless_screenshot_shows_the_fleet_the_first_time(
        start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``chromium --headless --screenshot`` shoots at the page's load: its first paint must be
    the fleet, every time, not the empty shell waiting for the stream's first event."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (tests/install-chromium.sh)")
    from PIL import Image

    package(write_scale_model(tmp_path / "a", "a", 2.0), store / "a.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    _invoke(runtime_client(server.url), "a.tar.gz")  # loaded: a row with a "loaded" badge
    url = f"{server.url}/_emulator/"
    for attempt in range(3):
        shot = tmp_path / f"first-paint-{attempt}.png"
        chromium_cli(f"--screenshot={shot}", url)
        with Image.open(shot) as image:
            colours = {colour for _count, colour in image.convert("RGB").getcolors(1 << 24)}
        assert LOADED_BADGE in colours, f"screenshot {attempt + 1}: no model row painted"
    dom = chromium_cli("--dump-dom", url)
    assert 'data-model="a.tar.gz"' in dom and 'data-state="loaded"' in dom


def test_page_assets_are_served_by_the_emulator(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                               tmp_path: Path) -> None:
    """No CDN: every script and style the page loads comes from the emulator itself."""
    package(write_scale_model(tmp_path / "a", "a", 2.0), store / "a.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    html = get_text(f"{server.url}/_emulator/")
    # Everything it loads or links to is the emulator's own (the state inside it names the
    # instances' Triton URLs: data, not something loaded).
    loaded = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert loaded and all(u.startswith("/") for u in loaded), loaded
    for asset, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        with urllib.request.urlopen(f"{server.url}/_emulator/page/{asset}") as resp:
            assert resp.headers["Content-Type"].startswith(kind)
    state = get_json(f"{server.url}/_emulator/page/state")
    assert set(state) == {"Time", "ClockScale", "Endpoints", "Timeline", "Events", "Errors",
                          "Alarms", "Activity"}
    assert state["Endpoints"]["local"]["Variants"]["AllTraffic"]["Instances"][0]["InstanceId"] \
        == "i-1"
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(f"{server.url}/_emulator/page/secrets.txt")
    assert excinfo.value.code == 404
    excinfo.value.close()


def test_page_shows_a_multi_container_endpoint_and_its_containers_models(
        start_emulator, store: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
        browser_page: Any) -> None:
    from tests.multi_container_support import (
        TRITON_IMAGE,
        deploy,
        sagemaker_client,
        triton_tarball,
    )

    server = start_emulator()
    containers = [{"Image": TRITON_IMAGE, "ContainerHostname": name,
                   "ModelDataUrl": f"file://{triton_tarball(tmp_path, store, name, scale)}",
                   "Environment": {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": name}}
                  for name, scale in (("double", 2), ("triple", 3))]
    deploy(sagemaker_client(server.url), "direct", containers, mode="Direct")
    rt = runtime_client(server.url)
    resp = rt.invoke_endpoint(EndpointName="direct", TargetContainerHostname="triple",
                              ContentType="application/json", Body=scale_request([1, 2, 3, 4]))
    resp["Body"].read()

    page = browser_page
    page.goto(f"{server.url}/_emulator/")
    page.wait_for_selector('#connection[data-connected="true"]', timeout=WAIT_MS)
    instance = page.wait_for_selector('.endpoint[data-endpoint="direct"] .instance',
                                      timeout=WAIT_MS)
    head = instance.inner_text()
    assert "double (triton)" in head and "triple (triton)" in head and "Direct" in head
    # Each Triton container's model, named by its container, loaded (single-model containers
    # load at start).
    rows = '.endpoint[data-endpoint="direct"] tr.model[data-state="loaded"]'
    page.wait_for_function(f"""() => document.querySelectorAll('{rows}').length === 2""",
                           timeout=WAIT_MS)
    # Read in one evaluation: the stream redraws the rows every second, and a row handle taken
    # before a redraw reads as empty.
    texts = page.eval_on_selector_all(rows, "rows => rows.map(row => row.innerText)")
    shown = sorted(text.split("\t")[1] for text in texts)
    assert shown == ["(the endpoint's model) in double", "(the endpoint's model) in triple"]
    # /metrics reads the same instances: it scrapes and counts the one invocation.
    _types, samples = scrape(server.url)
    assert value(samples, "sagemaker_invocations_total", endpoint_name="direct",
                 variant_name="AllTraffic") == 1


def test_a_single_model_endpoints_start_up_load_is_on_the_page_before_any_call(
        start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The feed watches an instance from the moment it is built, not from its first request."""
    from tests.multi_container_support import TRITON_IMAGE, deploy, sagemaker_client

    tarball = package(write_scale_model(tmp_path / "one", "one", scale=2.0),
                      store / "one.tar.gz", "folder")
    server = start_emulator()
    deploy(sagemaker_client(server.url), "single", [
        {"Image": TRITON_IMAGE, "Mode": "SingleModel", "ModelDataUrl": f"file://{tarball}"}])
    events = get_json(f"{server.url}/_emulator/page/state")["Events"]
    steps = [e["step"] for e in events if e["endpoint"] == "single"]
    assert "loaded" in steps, f"no start-up load on the page: {events}"


def test_page_shows_an_asynchronous_endpoints_queue(
        start_emulator, store: Path, tmp_path: Path, s3_server: Any,  # type: ignore[no-untyped-def]
        browser_page: Any) -> None:
    """An asynchronous endpoint's card shows its queue: the backlog, what waits, what is in
    flight and the oldest request's age; it empties once the model answers."""
    from tests.multi_container_support import TRITON_IMAGE, sagemaker_client

    gate = tmp_path / "gate"  # absent: the model holds its calls
    tarball = package(write_scale_model(tmp_path / "held", "held", scale=2.0,
                                        run_gate=str(gate)), store / "held.tar.gz", "folder")
    s3_server.bucket("page-async")
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url)
    sm = sagemaker_client(server.url)
    sm.create_model(ModelName="queued", PrimaryContainer={
        "Image": TRITON_IMAGE, "Mode": "SingleModel", "ModelDataUrl": f"file://{tarball}"})
    sm.create_endpoint_config(EndpointConfigName="queued", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "queued", "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}], AsyncInferenceConfig={
        "ClientConfig": {"MaxConcurrentInvocationsPerInstance": 1},
        "OutputConfig": {"S3OutputPath": "s3://page-async/out/"}})
    sm.create_endpoint(EndpointName="queued", EndpointConfigName="queued")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="queued",
                                              WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    rt = runtime_client(server.url)
    try:
        for _ in range(3):
            rt.invoke_endpoint_async(EndpointName="queued", ContentType="application/json",
                                     Body=scale_request([1, 2, 3, 4]))
        page = browser_page
        page.goto(f"{server.url}/_emulator/")
        page.wait_for_selector('#connection[data-connected="true"]', timeout=WAIT_MS)
        card = '[data-endpoint="queued"] [data-async-queue]'
        page.wait_for_function(f"""() => {{
            const q = document.querySelector('{card}');
            return q && q.querySelector('[data-figure="async-backlog"]').textContent === "3"
                && q.querySelector('[data-figure="async-waiting"]').textContent === "2"
                && q.querySelector('[data-figure="async-in-flight"]').textContent === "1"; }}""",
                               timeout=WAIT_MS)
        assert page.inner_text(f'{card} [data-figure="async-oldest"]').endswith(" s")
        assert "in flight (of 1)" in page.inner_text(card)
        queue = get_json(f"{server.url}/_emulator/models")["Endpoints"]["queued"]["AsyncQueue"]
        assert (queue["Backlog"], queue["Waiting"], queue["InFlight"]) == (3, 2, 1)
        assert queue["OldestRequestAgeSeconds"] >= 0
        gate.touch()
        page.wait_for_function(f"""() => document.querySelector(
            '{card} [data-figure="async-backlog"]').textContent === "0" """, timeout=WAIT_MS)
        assert page.inner_text(f'{card} [data-figure="async-oldest"]') == "–"
    finally:
        gate.touch()
