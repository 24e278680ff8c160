"""A request body kept as the pieces it arrived in (emulator.contract.body)."""

from __future__ import annotations

from emulator.contract.body import Body


def test_the_whole_is_the_pieces_in_order_joined_once() -> None:
    body = Body([b"ab", b"cde", b"f"])
    assert len(body) == 6
    whole = bytes(body)
    assert whole == b"abcdef"
    assert bytes(body) is whole  # joined once, then kept


def test_the_head_comes_from_the_first_piece_or_the_whole() -> None:
    body = Body([b"abc", b"def"])
    assert body.head(2) == b"ab"
    assert body.head(5) == b"abcde"
    assert body.head(10) == b"abcdef"
    assert Body([]).head(3) == b""


def test_the_bytes_from_an_offset_on_are_views_of_the_pieces() -> None:
    body = Body([b"abc", b"def", b"gh"])
    assert [bytes(v) for v in body.pieces_from(0)] == [b"abc", b"def", b"gh"]
    assert [bytes(v) for v in body.pieces_from(4)] == [b"ef", b"gh"]
    assert [bytes(v) for v in body.pieces_from(3)] == [b"def", b"gh"]
    assert list(body.pieces_from(8)) == []


def test_one_bytes_object_is_taken_as_it_is() -> None:
    data = b"xyz"
    assert bytes(Body.of(data)) is data
    body = Body([b"a", b"b"])
    assert Body.of(body) is body
