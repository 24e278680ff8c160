"""What the pytest plugin's fixtures hand to tests: a running emulator and an endpoint on it.

Kept apart from ``pytest_plugin.py`` so it can be used without pytest (notebooks, scripts), and
so the plugin module, which pytest imports in every session of a project that installs this
package, stays cheap to import.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.processes import bound_socket, dies_with_parent, stop_process, wait_until

LOCAL_REGION = "us-east-1"
DEFAULT_ENDPOINT = "local"


class EmulatorStartError(RuntimeError):
    """The emulator did not answer ``/ping`` in time; the message carries its log's tail."""


def ping(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ping", timeout=timeout_s) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class EmulatorProcess:
    """``mme serve`` as a child process on a free port: the one way this project starts it
    (the pytest plugin, ``mme loadtest``, ``mme bench scale``, the tests). ``start`` returns once
    it answers ``/ping`` (or raises ``EmulatorStartError`` with its log's tail, leaving nothing
    running); its output goes to ``log_path``; it dies with this process; ``stop`` ends it.

    Settings go through ``MME_*`` (``settings``), or as ``flags`` after ``serve`` (flags win).
    ``environment`` is the child's base environment (default: this process's); ``entry`` what
    the interpreter runs before ``serve`` (default ``-m mme``), in ``cwd`` (default: this
    process's working folder; another checkout runs another revision's code)."""

    settings: Mapping[str, str]
    log_path: Path
    host: str = "127.0.0.1"
    startup_timeout_s: float = 180.0
    port: int = 0
    flags: Sequence[str] = ()
    environment: Mapping[str, str] | None = None
    entry: Sequence[str] = ("-m", "mme")
    cwd: Path | None = None
    _process: subprocess.Popen[bytes] | None = None
    _log: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def command(self) -> list[str]:
        # `python -m mme` rather than the `mme` script: the interpreter running pytest is
        # the one whose packages (and Triton wheel) the emulator must use.
        return [sys.executable, *self.entry, "serve", *self.flags]

    def start(self) -> EmulatorProcess:
        env = dict(os.environ if self.environment is None else self.environment)
        env.update(self.settings)
        env.update({"MME_HOST": self.host, "MME_PORT": str(self.port)})
        # Without a port of its own choosing the emulator gets a socket this process bound and
        # listens on: a port merely found free could be taken by another server before the
        # child binds it, and that server would then answer our pings.
        listening = None if self.port else bound_socket(self.host)
        if listening is not None:
            self.port = listening.getsockname()[1]
            env.update({"MME_PORT": str(self.port), "MME_LISTEN_FD": str(listening.fileno())})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            command, preexec_fn = dies_with_parent(self.command())  # pytest killed: none lingers
            self._process = subprocess.Popen(
                command,
                env=env,
                cwd=self.cwd,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=() if listening is None else (listening.fileno(),),
                preexec_fn=preexec_fn,
                # Ctrl-C in the terminal reaches the parent only, which stops the emulator
                # when it is done with it (a load test first writes its report).
                start_new_session=True,
            )
        finally:
            if listening is not None:
                listening.close()  # the child has its copy
        try:
            started = wait_until(lambda: ping(self.url, timeout_s=1.0), self.startup_timeout_s,
                                 still_starting=self._still_starting)
        except BaseException:  # it exited, or Ctrl-C while it starts: nothing is left behind
            self.stop()
            raise
        if not started:
            self.stop()
            raise EmulatorStartError(
                f"the emulator did not answer {self.url}/ping within "
                f"{self.startup_timeout_s:g}s; log {self.log_path}:\n{_tail(self.log_path)}"
            )
        return self

    def _still_starting(self) -> None:
        code = self._process.poll() if self._process is not None else None
        if code is not None:
            self._close_log()
            raise EmulatorStartError(
                f"the emulator exited with code {code} while starting; log "
                f"{self.log_path}:\n{_tail(self.log_path)}"
            )

    def stop(self, timeout_s: float = 60.0, signum: int = signal.SIGTERM) -> int | None:
        """Send ``signum`` and wait for the exit, SIGKILL past ``timeout_s``; the exit code.
        SIGTERM (or SIGINT, as Ctrl-C): uvicorn stops every Triton in its lifespan; SIGKILL:
        a crash, whose Tritons the next start on the same cache folder removes."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            if signum == signal.SIGTERM:
                stop_process(process, timeout_s)
            else:
                process.send_signal(signum)
                try:
                    process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._close_log()
        return process.returncode

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class MmeEndpoint:
    """An endpoint under test: the emulator's (``target == "local"``) or a real one ("aws")."""

    name: str
    target: str  # local | aws
    region: str
    client: Any  # boto3 sagemaker-runtime client
    url: str | None = None  # the emulator's base URL (local only)
    store: Path | None = None  # the folder of tarballs the endpoint serves (local copy)
    digests: dict[str, str] = field(default_factory=dict)  # TargetModel -> sha256

    @property
    def is_local(self) -> bool:
        return self.target == "local"

    def target_models(self) -> list[str]:
        return sorted(self.digests)

    def invoke_raw(
        self, target_model: str | None, body: bytes, content_type: str, **kwargs: Any
    ) -> dict[str, Any]:
        """``invoke_endpoint`` with the body as given; returns boto3's response."""
        params: dict[str, Any] = {
            "EndpointName": self.name,
            "Body": body,
            "ContentType": content_type,
            **kwargs,
        }
        if target_model is not None:
            params["TargetModel"] = target_model
        return dict(self.client.invoke_endpoint(**params))

    def invoke(
        self,
        target_model: str | None,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        binary: bool = True,
        binary_outputs: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Encode ``inputs`` (name -> array), invoke, and decode the outputs by name."""
        from harness.payloads import build_request, parse_response

        request = build_request(inputs, outputs, binary=binary, binary_outputs=binary_outputs)
        response = self.invoke_raw(target_model, request.body, request.content_type, **kwargs)
        return parse_response(response["Body"].read(), response.get("ContentType"))

    def metrics(self) -> dict[str, Any]:
        """The endpoint's CloudWatch-style metrics from ``/_emulator/metrics`` (local only)."""
        import json

        if self.url is None:
            raise RuntimeError(
                "metrics() reads the emulator; a real endpoint publishes to CloudWatch instead"
            )
        with urllib.request.urlopen(f"{self.url}/_emulator/metrics", timeout=10) as resp:
            data = json.load(resp)
        from harness.loadtest.invokers import find_endpoint_snapshot

        snapshot = find_endpoint_snapshot(data, self.name)
        return dict(snapshot["Metrics"]) if snapshot else {}


def local_client(url: str, region: str = LOCAL_REGION) -> Any:
    """A boto3 sagemaker-runtime client bound to the emulator (dummy credentials: no SigV4
    check happens locally, but botocore insists on signing)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sagemaker-runtime",
        endpoint_url=url,
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(read_timeout=70, retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def aws_client(region: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    session = boto3.Session(region_name=region)
    return session.client(
        "sagemaker-runtime", config=Config(read_timeout=70, retries={"mode": "standard"})
    )
