"""A stop (Ctrl-C, SIGTERM) that no client can hold up: the HTTP protocol's side of it.

uvicorn stops by telling each connection to finish what it is answering, then waiting, with no
limit, until every connection has closed. Two kinds of client held ``mme serve`` past SIGTERM
(seen: still running after 45 s):

- one that pipelines requests: uvicorn marks the *last request it parsed* "close when done",
  not the one being answered, so every queued request still runs, one after another (50 page
  streams of 2 s each: 100 s);
- one that stops reading: an answer whose bytes the client does not take waits for room in
  the socket for ever, and a closed connection with bytes still buffered is never let go.

``ShutdownHttpProtocol`` fixes both at shutdown: requests queued behind the one being answered
are dropped (a pipelining client must resend unanswered requests on another connection,
RFC 9112 9.3.2), the one being answered closes the connection when it ends, and a connection
whose client takes no byte for ``STALLED_CLIENT_S`` while there are bytes to give is cut.
Answers still being computed (an invocation) are waited for as before: their own timeouts
bound them.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from emulator.http_protocol import EmulatorHttpProtocol

# [U] How long, once stopping, a client may leave bytes untaken before its connection is cut:
#     the page's event stream promises to let go within 2 s (emulator/page/routes.py, STREAM_S).
STALLED_CLIENT_S = 2.0
CHECK_EVERY_S = 0.25


class ShutdownHttpProtocol(EmulatorHttpProtocol):
    """``EmulatorHttpProtocol`` that knows which request it is answering, so that a stop can
    end that one's connection, and a stalled client, in bounded time."""

    _answering: RequestResponseCycle | None = None
    _lost = False

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._answering = cycle  # uvicorn's ``self.cycle`` is the last request *parsed*
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        answering = self._answering
        if answering is not None and answering is not self.cycle:
            # uvicorn tells only its ``self.cycle`` (a queued request) that the client is gone;
            # the answer being written must know too, or it writes on into a closed socket.
            self._gone(answering)
        super().connection_lost(exc)

    def shutdown(self) -> None:
        answering = self._answering
        if answering is None or answering.response_complete:
            super().shutdown()  # idle: uvicorn closes it
        else:
            self.pipeline.clear()  # never started, never answered: the client resends them
            answering.keep_alive = False  # close once this answer is complete
        self.loop.call_later(CHECK_EVERY_S, self._cut_if_stalled, 0.0, -1)

    def _cut_if_stalled(self, stalled_s: float, last_buffered: int) -> None:
        """Every CHECK_EVERY_S after shutdown until the connection is gone: cut it once its
        client has taken none of the bytes waiting for it for STALLED_CLIENT_S."""
        if self._lost:
            return
        buffered = self.transport.get_write_buffer_size()  # bytes the socket would not take
        stalled_s = stalled_s + CHECK_EVERY_S if buffered and buffered >= last_buffered else 0.0
        if stalled_s >= STALLED_CLIENT_S:
            self.logger.info("stopping: a client took no bytes for %.1fs; connection cut",
                             stalled_s)
            if self._answering is not None and not self._answering.response_complete:
                self._gone(self._answering)
            self.transport.abort()
            return
        self.loop.call_later(CHECK_EVERY_S, self._cut_if_stalled, stalled_s, buffered)

    @staticmethod
    def _gone(cycle: RequestResponseCycle) -> None:
        if not cycle.response_complete:
            cycle.disconnected = True
        cycle.message_event.set()
        cycle.flow.resume_writing()  # a send waiting for room returns (and sees: disconnected)
