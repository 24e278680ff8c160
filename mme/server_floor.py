"""The emulator's HTTP server and Triton client with nothing of SageMaker: a floor for ``mme bench
overhead``.

uvicorn with the emulator's protocol (``emulator/http_protocol.py``) and its inference client
(``emulator/triton/client.py``), configured as ``mme serve`` configures them, relaying every POST
body and its headers to one Triton model and Triton's answer back as it is. No validation, no
endpoint or model lookup, no metrics, no renaming: whatever the emulator costs over this is the
SageMaker behaviour; whatever this costs over the bare relay (``mme/relay.py``) is the Python HTTP
server and client themselves.

    python -m mme.server_floor --fd FD --to URL    (FD: a listening socket, inherited;
                                                    URL: http://HOST:PORT/v2/models/M/infer)
"""

from __future__ import annotations

import argparse
import socket
import urllib.parse

import uvicorn
from starlette.types import Receive, Scope, Send

from emulator.server import uvicorn_config
from emulator.settings import Settings
from emulator.triton.client import InferPool

# Request headers Triton must see as they came (the rest are the connection's own).
_PASSED = (b"content-type", b"inference-header-content-length")


class Floor:
    """The ASGI app: each POST's body to the model, Triton's answer back."""

    def __init__(self, upstream: str) -> None:
        url = urllib.parse.urlsplit(upstream)
        assert url.hostname is not None and url.port is not None, upstream
        self.host, self.port = url.hostname, url.port
        self.model = url.path.split("/")[3]  # /v2/models/{model}/infer
        self.pool: InferPool | None = None  # made in the server's loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if self.pool is None:
            self.pool = InferPool(self.host, self.port, 64)
        pieces, more = [], True
        while more:
            message = await receive()
            pieces.append(message.get("body", b""))
            more = message.get("more_body", False)
        headers = {name.decode("latin-1"): value.decode("latin-1")
                   for name, value in scope["headers"] if name in _PASSED}
        answer = await self.pool.infer(self.model, b"".join(pieces), headers, timeout=60)
        raw = [(b"content-length", str(len(answer.body)).encode())]
        raw += [(name.encode("latin-1"), value.encode("latin-1"))
                for name, value in answer.headers.items() if name.encode() in _PASSED]
        await send({"type": "http.response.start", "status": answer.status, "headers": raw})
        await send({"type": "http.response.body", "body": answer.body})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mme.server_floor",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--fd", type=int, required=True, help="an inherited listening socket")
    parser.add_argument("--to", required=True, metavar="URL", help="the model's infer URL")
    args = parser.parse_args()
    listening = socket.socket(fileno=args.fd)
    # Served exactly as mme serve serves the emulator.
    uvicorn.Server(uvicorn_config(Floor(args.to), Settings())).run(sockets=[listening])


if __name__ == "__main__":
    main()
