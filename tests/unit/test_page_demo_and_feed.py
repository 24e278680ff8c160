"""``mme demo`` ends on the live page only for a person at a terminal; the page's feed."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from emulator.page.feed import BUCKET_S, TIMELINE_S, Feed

END_ON_PAGE = "from mme.demo import end_on_the_page; end_on_the_page('http://h:1/_emulator/'); " \
              "print('stopped')"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return {**env, **extra}


def _read_until(fd: int, marker: bytes, timeout_s: float = 60) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout_s
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
    return seen


def test_on_a_terminal_the_demo_waits_for_enter_on_the_page() -> None:
    controller, terminal = pty.openpty()
    child = subprocess.Popen([sys.executable, "-c", END_ON_PAGE], stdin=terminal,
                             stdout=terminal, stderr=terminal, env=_env(), close_fds=True)
    os.close(terminal)
    try:
        shown = _read_until(controller, b"Press Enter")
        assert b"http://h:1/_emulator/" in shown and b"Press Enter to stop" in shown
        assert child.poll() is None  # it waits
        os.write(controller, b"\n")
        assert child.wait(60) == 0
        assert b"stopped" in _read_until(controller, b"stopped")
    finally:
        if child.poll() is None:
            child.kill()
        os.close(controller)


@pytest.mark.parametrize("case", ["CI set", "stdin not a terminal"])
def test_in_ci_or_without_a_terminal_the_demo_never_waits(case: str) -> None:
    if case == "CI set":
        controller, terminal = pty.openpty()
        child = subprocess.Popen([sys.executable, "-c", END_ON_PAGE], stdin=terminal,
                                 stdout=subprocess.PIPE, env=_env(CI="true"))
        os.close(terminal)
    else:
        controller = None
        child = subprocess.Popen([sys.executable, "-c", END_ON_PAGE], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, env=_env())
    try:
        out, _ = child.communicate(timeout=60)  # never answered: it must end by itself
    finally:
        if controller is not None:
            os.close(controller)
    assert child.returncode == 0
    assert b"Press Enter" not in out and b"stopped" in out


def test_feed_counts_loads_unloads_and_errors_per_bucket_and_flags_evictions() -> None:
    feed = Feed()
    observe = feed._observer("ep", "AllTraffic", "i-1")
    observe("loading", "a.tar.gz", {"size": 10})
    observe("loaded", "a.tar.gz", {"seconds": 1.0, "size": 10})
    observe("unloading", "a.tar.gz", {"reason": "lru", "for": "b.tar.gz"})
    observe("unloaded", "a.tar.gz", {"seconds": 0.5})
    observe("unloading", "b.tar.gz", {"reason": "requested"})
    feed.invocation_failed("ep", "c.tar.gz", 400, "ValidationError", "Could not find model")

    events = feed.recent_events()
    assert [e["step"] for e in events] == ["unloading", "unloaded", "unloading", "loaded",
                                           "loading"]
    assert [e["evicted"] for e in events if e["step"] == "unloading"] == [False, True]
    assert events[2]["details"] == {"reason": "lru", "for": "b.tar.gz"}
    assert feed.recent_errors()[0]["code"] == "ValidationError"

    timeline = feed.timeline(time.time())
    buckets = timeline["Buckets"]
    assert len(buckets) == TIMELINE_S // BUCKET_S and timeline["BucketSeconds"] == BUCKET_S
    assert sum(b["loads"] for b in buckets) == 1
    assert sum(b["unloads"] for b in buckets) == 1
    assert sum(b["errors"] for b in buckets) == 1
    # Older than the window: nothing left of it.
    assert sum(b["loads"] for b in feed.timeline(time.time() + TIMELINE_S + BUCKET_S)
               ["Buckets"]) == 0
