"""A request body as the pieces the socket gave, joined into one bytes object only if a consumer
needs one.

A 5 MiB InvokeEndpoint body arrives in some twenty pieces. Joining them is a pass over the whole
body, and the shared-memory path to Triton needs none: it copies the tensor bytes, piece by
piece, straight into the region (``emulator/triton/shared_memory.py``). Under ``mme bench
overhead --workload binary --concurrency 32`` the join had been a fifth of the emulator's CPU.

A body that arrived in one piece stays that ``bytes`` object: consumers take ``bytes | Body`` and
call ``bytes(body)`` where they need the whole, which for ``bytes`` is the object itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class Body:
    """The pieces of one body, in order."""

    __slots__ = ("_pieces", "_size")

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self._pieces = list(pieces)
        self._size = sum(map(len, self._pieces))

    @classmethod
    def of(cls, body: bytes | Body) -> Body:
        return body if isinstance(body, Body) else cls((body,))

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        """The whole body; joined once, then kept as its only piece."""
        if len(self._pieces) != 1:
            self._pieces = [b"".join(self._pieces)]
        return self._pieces[0]

    def head(self, length: int) -> bytes:
        """The first ``length`` bytes (all of them if the body is shorter)."""
        first = self._pieces[0] if self._pieces else b""
        if len(first) >= length:
            return first[:length]
        return bytes(self)[:length]

    def pieces_from(self, start: int) -> Iterator[memoryview]:
        """The bytes from offset ``start`` on, as views of the pieces (nothing copied)."""
        for piece in self._pieces:
            if start >= len(piece):
                start -= len(piece)
                continue
            yield memoryview(piece)[start:]
            start = 0
