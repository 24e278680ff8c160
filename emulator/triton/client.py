"""A thin async client for Triton's KServe v2 HTTP API that passes bodies through untouched.

Bodies must pass through as bytes (no tensor decoding), so neither tritonclient nor httpx (which
added 1.1-1.4 ms p50 per call in the same proxy on a 2-core machine, against 0.45 ms for aiohttp).
The inference call, the one hot path, goes over ``InferConnection``: keep-alive HTTP/1.1 on an
asyncio protocol with httptools' parser, the request written in one system call. Under load it
costs the emulator a fraction of aiohttp's CPU per call (``mme bench overhead`` measures the whole
path against Triton). The control calls (index, health) keep aiohttp; load and unload go over
Triton's gRPC endpoint where the launcher opens one (``rebind``'s ``grpc_address``).

Why gRPC for loads: Triton's HTTP server answers a load (and an unload) in the thread that owns
the connection and blocks that thread until the load ends; every other connection the HTTP
server gave the same thread (it hands a new connection to the first idle one, so in practice
all of ours) waits as long. A load that never ends (a Python stub that died at import, an
``initialize`` that hangs) then stalls every inference of every loaded model. Triton's gRPC
server runs each load in a thread of its own (docs/isolation.md).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import aiohttp
import httptools
import yarl

from emulator.contract.body import Body
from emulator.contract.runtime import KSERVE_HEADER_LENGTH
from emulator.triton import shared_memory

if TYPE_CHECKING:
    from collections.abc import Awaitable

log = logging.getLogger(__name__)

# Called with (Triton model name, status, body) for every inference answer that is not a 200, so
# the model manager can see a broken container without a call from the request path.
InferListener = Callable[[str, int, bytes], None]


class TritonError(Exception):
    """Triton answered with an error status; ``body`` is its response text as sent."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


class TritonUnreachable(Exception):
    """No answer from Triton at all (it died, or is restarting)."""


@dataclass(frozen=True)
class TritonResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


class ResponseHeaders(Mapping[str, str]):
    """A response's headers, looked up by name in any case (the last of repeated names wins)."""

    __slots__ = ("_by_name",)

    def __init__(self, by_lower_name: dict[str, str]) -> None:
        self._by_name = by_lower_name

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        return self._by_name.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"ResponseHeaders({self._by_name!r})"


# Up to this size the request line, headers and body are joined and written at once; a larger
# body is written after its headers as it is (no copy), in one vectored write where the loop can.
JOIN_BODY_BYTES = 256 * 1024
# Encoded request heads kept per pool (model and headers); past it they are encoded afresh.
HEADS_KEPT = 1024


class InferConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to Triton; one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[TritonResponse] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"Triton's answer could not be parsed: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(
                f"connection closed before the answer was complete{f': {exc}' if exc else ''}"))

    # --- httptools callbacks -----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # nothing asked: not Triton's way, so drop it
            self.close()
            return
        if not self._parser.should_keep_alive():
            self.close()
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        waiter.set_result(TritonResponse(self._parser.get_status_code(),
                                         ResponseHeaders(self._headers), body))

    # --- the request ----------------------------------------------------------------------------

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def expire(self) -> None:
        """The call's deadline passed: its answer is a TimeoutError, the connection is closed."""
        self._fail(asyncio.TimeoutError())

    def request(self, head: bytes, body: bytes) -> asyncio.Future[TritonResponse]:
        """Send one request; the future is its answer (ConnectionError if the connection ends)."""
        assert self._waiter is None or self._waiter.done(), "one request at a time"
        assert self.transport is not None
        self._waiter = waiter = self._loop.create_future()
        self._headers = {}
        self._body = []
        if len(body) <= JOIN_BODY_BYTES:
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))
        return waiter


@functools.lru_cache(maxsize=4096)
def _infer_path(model: str) -> str:
    """The request target, quoted as aiohttp's URLs are (the path built from its parts)."""
    return yarl.URL.build(path=f"/v2/models/{model}/infer").raw_path


class InferPool:
    """Keep-alive connections to one Triton address; at most ``limit`` requests (so connections)
    at once, the others wait for a slot as with aiohttp's connection limit.

    The timeout covers the whole call, as aiohttp's total timeout does: a timer at the deadline
    fails the answer's future and closes the connection. Waiting for a slot or for a new
    connection, rare on a warm pool, is bounded by the same deadline.
    """

    def __init__(self, host: str, port: int, limit: int) -> None:
        self.host = host
        self.port = port
        self.host_header = f"Host: {host}:{port}\r\n".encode("latin-1")
        self._limit = limit
        self._busy = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._idle: list[InferConnection] = []
        self._open: set[InferConnection] = set()
        self._heads: dict[tuple[object, ...], bytes] = {}

    async def infer(self, model: str, body: bytes, headers: Mapping[str, str],
                    timeout: float | None) -> TritonResponse:
        """The answer; asyncio.TimeoutError past ``timeout``, OSError if the connection fails."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        head = self._head(model, headers) + b"Content-Length: %d\r\n\r\n" % len(body)
        while self._busy >= self._limit:
            await self._wait_for_slot(loop, deadline)
        self._busy += 1
        try:
            connection = self._idle_connection() or await self._connect(loop, deadline)
            done = False
            timer = None
            try:
                answer = connection.request(head, body)
                if deadline is not None:
                    timer = loop.call_at(deadline, connection.expire)
                response = await answer
                done = True
            finally:
                if timer is not None:
                    timer.cancel()
                if done and not connection.closed:
                    self._idle.append(connection)
                else:  # failed, timed out or cancelled mid-answer: the connection is unusable
                    connection.close()
                    self._open.discard(connection)
        finally:
            self._busy -= 1
            self._wake_one()
        return response

    def _head(self, model: str, headers: Mapping[str, str]) -> bytes:
        """The request line and headers but Content-Length: the same for every call of one model
        with one content type, so they are encoded once (at most HEADS_KEPT kept)."""
        key: tuple[object, ...] = (model, *headers.items())
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= HEADS_KEPT:
                self._heads.clear()
            head = self._heads[key] = b"".join((
                b"POST ", _infer_path(model).encode("ascii"), b" HTTP/1.1\r\n",
                self.host_header,
                *(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items())))
        return head

    def _wake_one(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _idle_connection(self) -> InferConnection | None:
        while self._idle:
            connection = self._idle.pop()  # the most recent: the likeliest to be alive
            if not connection.closed:
                return connection
            self._open.discard(connection)
        return None

    async def _wait_for_slot(self, loop: asyncio.AbstractEventLoop,
                             deadline: float | None) -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        self._slot_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, None if deadline is None else
                                   max(deadline - loop.time(), 0))
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken but leaving (timed out, cancelled): pass the turn on
            raise

    async def _connect(self, loop: asyncio.AbstractEventLoop,
                       deadline: float | None) -> InferConnection:
        connecting = loop.create_connection(lambda: InferConnection(loop), self.host, self.port)
        try:
            _transport, connection = await asyncio.wait_for(
                connecting, None if deadline is None else max(deadline - loop.time(), 0))
        except asyncio.TimeoutError:  # as aiohttp: a connect timeout is a connection error
            raise ConnectionError(f"timed out connecting to {self.host}:{self.port}") from None
        self._open.add(connection)
        return connection

    def close(self) -> None:
        """Close every connection, in flight or idle (their calls fail as unreachable)."""
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()


@dataclass(frozen=True)
class SharedBody:
    """A request whose tensor bytes Triton reads from a piece of ``region`` at ``offset``."""

    region: shared_memory.Region
    offset: int
    header: bytes  # the JSON Triton is sent instead of the body


class TritonClient:
    def __init__(self, base_url: str, connections: int = 256,
                 shared_memory_bytes: int = 0) -> None:
        """``shared_memory_bytes``: the size of the region through which large bodies reach
        Triton when it can map our memory (``rebind``'s ``shm_dir``); 0 for none."""
        self.base_url = base_url.rstrip("/")
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._pool: InferPool | None = None
        self._infer_listeners: list[InferListener] = []
        self._shared_memory_bytes = shared_memory_bytes
        self._shm_dir: Path | None = None
        self._region: shared_memory.Region | None = None
        # The region being made for this Triton, or the outcome (None: it cannot be had).
        self._region_making: asyncio.Future[shared_memory.Region | None] | None = None
        self.shared_bodies = 0  # requests whose tensors reached Triton through shared memory
        # Load and unload go over gRPC at this address (None: over HTTP), on this client.
        self._grpc_address: str | None = None
        self._grpc: Any = None  # tritonclient.grpc.aio.InferenceServerClient, made on first use
        self._closing: set[asyncio.Task[None]] = set()

    def add_infer_listener(self, listener: InferListener) -> None:
        self._infer_listeners.append(listener)

    def rebind(self, base_url: str, shm_dir: Path | None = None,
               grpc_address: str | None = None) -> None:
        """Point at a (re)started Triton; ``shm_dir`` is its /dev/shm as seen from here, where
        Triton can map files we write (None: a Triton that cannot, e.g. in a container);
        ``grpc_address`` its gRPC endpoint for loads and unloads (None: they go over HTTP)."""
        self.base_url = base_url.rstrip("/")
        if self._pool is not None:
            self._pool.close()  # the old address's: that Triton is gone
            self._pool = None
        self._drop_region()
        self._shm_dir = shm_dir
        self._drop_grpc()
        self._grpc_address = grpc_address

    def _drop_grpc(self) -> None:
        grpc, self._grpc = self._grpc, None
        if grpc is not None:  # its channel is closed in the background: rebind is synchronous
            task = asyncio.get_running_loop().create_task(grpc.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _grpc_client(self) -> Any:
        if self._grpc is None:
            from tritonclient.grpc.aio import InferenceServerClient

            self._grpc = InferenceServerClient(self._grpc_address)
        return self._grpc

    async def _grpc_call(self, call: Callable[[Any], Awaitable[Any]],
                         timeout: float | None) -> None:
        """A control call over gRPC, answered as the HTTP one would be: TritonError(400, its
        JSON error body) when Triton refuses, TritonUnreachable when Triton is gone,
        asyncio.TimeoutError past ``timeout``."""
        from tritonclient.utils import InferenceServerException

        try:
            await asyncio.wait_for(call(self._grpc_client()), timeout)
        except InferenceServerException as exc:
            status = str(exc.status() or "")
            if status.endswith(("UNAVAILABLE", "CANCELLED")):
                raise TritonUnreachable(f"Triton at {self._grpc_address} (gRPC) is unreachable: "
                                        f"{exc.message()}") from exc
            # Triton's HTTP server answers every refused load or unload 400 with this body.
            raise TritonError(400, json.dumps({"error": exc.message()}, ensure_ascii=False,
                                              separators=(",", ":"))) from exc

    def _drop_region(self) -> None:
        if self._region is not None:
            self._region.close()
            self._region = None
        self._region_making = None  # one being made now closes itself when it is done

    def _infer_pool(self) -> InferPool:
        pool = self._pool
        if pool is None:
            url = urlsplit(self.base_url)
            if url.scheme != "http" or url.hostname is None:
                raise TritonUnreachable(f"Triton at {self.base_url} is unreachable: "
                                        "not an http:// address")
            pool = self._pool = InferPool(url.hostname, url.port or 80, self._connections)
        return pool

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, force_close=False),
                timeout=aiohttp.ClientTimeout(total=None),
                # Bodies pass through: asking for gzip would make Triton compress every answer
                # and us decompress it again, on the same CPU (measured by mme bench overhead).
                skip_auto_headers=("Accept-Encoding", "User-Agent"),
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._drop_region()
        self._drop_grpc()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _request(self, method: str, path: str, *, data: bytes | None = None,
                       headers: Mapping[str, str] | None = None,
                       timeout: float | None = None) -> TritonResponse:
        try:
            async with self.session.request(
                method, f"{self.base_url}{path}", data=data, headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                body = await resp.read()
                return TritonResponse(resp.status, resp.headers, body)
        except (aiohttp.ClientConnectionError, ConnectionError) as exc:
            raise TritonUnreachable(f"Triton at {self.base_url} is unreachable: {exc}") from exc

    async def _json_call(self, method: str, path: str, payload: Any = None,
                         timeout: float | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        resp = await self._request(method, path, data=data, timeout=timeout,
                                   headers={"Content-Type": "application/json"})
        if resp.status != 200:
            raise TritonError(resp.status, resp.body.decode(errors="replace"))
        return json.loads(resp.body) if resp.body else None

    async def infer(self, model: str, body: bytes | Body, headers: Mapping[str, str],
                    timeout: float | None) -> TritonResponse:
        """POST /v2/models/{model}/infer; raises asyncio.TimeoutError past ``timeout``."""
        pool = self._infer_pool()
        shared = None
        if (len(body) >= shared_memory.MIN_BODY_BYTES and self._shm_dir is not None
                and KSERVE_HEADER_LENGTH in headers):
            loop = asyncio.get_running_loop()
            started = loop.time()
            shared = await self._share(body, headers, timeout)
            if timeout is not None:  # the wait for room is part of the call
                timeout -= loop.time() - started
        if shared is not None:
            sent, headers = shared.header, {"Content-Type": "application/json"}
        else:
            sent = bytes(body)  # a body of one piece is that object: nothing joined
        try:
            response = await pool.infer(model, sent, headers, timeout)
        except asyncio.TimeoutError:  # an OSError too, since Python 3.11: not unreachable
            raise
        except OSError as exc:  # refused, reset, closed mid-answer (ConnectionError)
            raise TritonUnreachable(f"Triton at {self.base_url} is unreachable: {exc}") from exc
        finally:
            if shared is not None:
                shared.region.give_back(shared.offset)
        if response.status != 200:
            for listener in self._infer_listeners:
                try:
                    listener(model, response.status, response.body)
                except Exception:  # a listener's bug must not change the answer
                    log.exception("infer listener failed")
        return response

    async def _share(self, body: bytes | Body, headers: Mapping[str, str],
                     timeout: float | None) -> SharedBody | None:
        """The body's tensors written to shared memory, or None to send it over HTTP: no
        region, one too small for the body, or a body Triton might read differently
        (shared_memory). When the region is full this waits for room, up to ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        region = self._region or await self._made_region(timeout)
        if region is None:
            return None
        header_length = int(headers[KSERVE_HEADER_LENGTH])
        pieces = Body.of(body)
        tensor_bytes = len(pieces) - header_length
        left = None if deadline is None else max(deadline - loop.time(), 0.0)  # one deadline
        offset = await region.lend_when_free(tensor_bytes, left)
        if offset is None or region.closed:  # closed meanwhile: Triton was replaced
            return None
        header = shared_memory.shared_header(pieces.head(header_length), tensor_bytes,
                                             region.name, offset)
        if header is None:
            region.give_back(offset)
            return None
        region.write(offset, pieces.pieces_from(header_length))  # no join of the pieces
        self.shared_bodies += 1
        return SharedBody(region, offset, header)

    async def _made_region(self, timeout: float | None) -> shared_memory.Region | None:
        """This Triton's region, made once: the calls that come while it is being made wait for
        it (within their timeout) instead of going over HTTP. None if it cannot be had."""
        if self._region_making is None:
            if not self._shared_memory_bytes or self._shm_dir is None:
                return None
            self._region_making = asyncio.ensure_future(self._new_region(self._shm_dir))
        making = self._region_making
        if not making.done():
            await asyncio.wait_for(asyncio.shield(making), timeout)
        return making.result()

    async def _new_region(self, shm_dir: Path) -> shared_memory.Region | None:
        """Create and register this Triton's region (None if it cannot be had)."""
        making = asyncio.current_task()
        base_url = self.base_url
        try:
            # In a thread: allocating the pages takes some milliseconds, other calls go on.
            region, path = await asyncio.to_thread(shared_memory.Region.create, shm_dir,
                                                   self._shared_memory_bytes)
        except OSError as exc:
            log.warning("large request bodies go to Triton over HTTP: no shared memory in %s "
                        "(%s)", shm_dir, exc)
            return None
        try:
            await self._json_call(
                "POST", f"/v2/systemsharedmemory/region/{region.name}/register",
                {"key": region.key, "offset": 0, "byte_size": region.size}, timeout=30)
        except (TritonError, TritonUnreachable, asyncio.TimeoutError) as exc:
            region.close()
            log.warning("large request bodies go to Triton over HTTP: Triton did not take the "
                        "shared-memory region (%s)", exc)
            return None
        finally:
            path.unlink(missing_ok=True)  # both sides have mapped it: gone when both let go
        if self.base_url != base_url or self._region_making is not making:
            region.close()  # Triton was replaced meanwhile
            return None
        log.info("request bodies of %d KiB and more reach Triton at %s through %d MiB of "
                 "shared memory", shared_memory.MIN_BODY_BYTES >> 10, base_url,
                 region.size >> 20)
        self._region = region
        return region

    async def load(self, model: str, timeout: float | None = None) -> None:
        if self._grpc_address is not None:
            await self._grpc_call(lambda grpc: grpc.load_model(model), timeout)
            return
        await self._json_call("POST", f"/v2/repository/models/{model}/load", timeout=timeout)

    async def unload(self, model: str, dependents: bool = True, timeout: float = 360.0,
                     on_accepted: Callable[[], None] | None = None,
                     also: Collection[str] = ()) -> None:
        """Unload and wait until Triton reports the model gone (unload completes after the 200).

        ``on_accepted`` is called at the 200: Triton serves the model no more from then on.
        ``also``: other models whose end to wait for, e.g. an ensemble's steps: Triton reports
        an ensemble gone at once (it has no process) while it still unloads the steps its
        ``dependents`` unload took with it, their Python stubs a second or more each.
        """
        if self._grpc_address is not None:
            await self._grpc_call(lambda grpc: grpc.unload_model(
                model, unload_dependents=dependents), timeout)
        else:
            await self._json_call("POST", f"/v2/repository/models/{model}/unload",
                                  {"parameters": {"unload_dependents": dependents}},
                                  timeout=timeout)
        if on_accepted is not None:
            on_accepted()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        names = {model, *also}
        while loop.time() < deadline:
            states = {m["name"]: m.get("state") for m in await self.index()}
            if not any(states.get(name) in ("READY", "UNLOADING", "LOADING") for name in names):
                return
            await asyncio.sleep(0.05)
        raise TritonError(504, f"model {model} did not unload within {timeout}s")

    async def index(self) -> list[dict[str, Any]]:
        return await self._json_call("POST", "/v2/repository/index", {}) or []
