"""Downloads extracted as they arrive: safety checks, cleanup on failure, resuming, progress."""

from __future__ import annotations

import io
import logging
import os
import tarfile
from pathlib import Path

import pytest

from emulator.manager.extract import ArchiveTooLarge, UnsafeArchive, extract_stream
from emulator.manager.failures import StoreUnavailable
from emulator.manager.sources import FolderSource, ObjectNotFound, S3Source, progress_bar
from tests.support import tar_bytes


def _archive(files: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _Unseekable:
    """What a network stream offers: read, nothing else."""

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self._data, self._pos, self._fail_after = data, 0, fail_after

    def read(self, size: int = -1) -> bytes:
        if self._fail_after is not None and self._pos >= self._fail_after:
            raise StoreUnavailable("connection reset by the store")
        end = len(self._data) if size < 0 else self._pos + size
        if self._fail_after is not None:
            end = min(end, self._fail_after)
        chunk = self._data[self._pos:end]
        self._pos += len(chunk)
        return chunk


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize("mode", ["w:gz", "w", "w:bz2", "w:xz"])
def test_any_tar_compression_is_extracted_from_a_stream(tmp_path: Path, mode: str) -> None:
    data = _archive({"m/config.pbtxt": b"name: 'm'", "m/1/model.py": b"x = 1\n"}, mode)
    written = extract_stream(_Unseekable(data), tmp_path / "out" / "model", None)
    assert written == len(b"name: 'm'") + len(b"x = 1\n")
    assert (tmp_path / "out" / "model" / "m" / "1" / "model.py").read_bytes() == b"x = 1\n"
    assert _leftovers(tmp_path / "out") == ["model"]  # no staging folder left


def test_a_store_failure_mid_stream_passes_through_and_leaves_nothing(tmp_path: Path) -> None:
    data = _archive({"m/weights.bin": os.urandom(256 * 1024), "m/config.pbtxt": b"x"})
    staging = tmp_path / "artifacts"
    with pytest.raises(StoreUnavailable):
        extract_stream(_Unseekable(data, fail_after=len(data) // 2), staging / "k" / "model",
                       None, staging_parent=staging, staging_prefix=".download-k-")
    assert _leftovers(staging) == ["k"] and _leftovers(staging / "k") == []


def test_a_stream_that_ends_early_is_an_unreadable_archive(tmp_path: Path) -> None:
    data = _archive({"m/weights.bin": os.urandom(64 * 1024)}, "w")
    with pytest.raises(UnsafeArchive, match="not a readable"):
        extract_stream(_Unseekable(data[: len(data) // 2]), tmp_path / "model", None)
    assert _leftovers(tmp_path) == []


def test_the_cap_stops_writing_before_the_member_that_crosses_it(tmp_path: Path) -> None:
    data = _archive({"a.bin": b"a" * 1000, "b.bin": b"b" * 1000, "c.bin": b"c" * 1000})
    seen: list[str] = []
    with pytest.raises(ArchiveTooLarge):
        extract_stream(_Unseekable(data), tmp_path / "model", 1500)
    seen = _leftovers(tmp_path)
    assert seen == []  # the first member was written to staging, and staging is gone


@pytest.mark.parametrize("name, reason", [
    ("../evil.txt", "leads out"), ("/etc/evil", "absolute path")])
def test_unsafe_members_are_refused_in_stream_mode_too(tmp_path: Path, name: str,
                                                       reason: str) -> None:
    info = tarfile.TarInfo(name)
    data = tar_bytes([(tarfile.TarInfo("ok.txt"), b""), (info, b"x")])
    with pytest.raises(UnsafeArchive, match=reason):
        extract_stream(_Unseekable(data), tmp_path / "model", None)
    assert _leftovers(tmp_path) == []


def test_a_read_only_directory_does_not_block_the_files_after_it(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        folder = tarfile.TarInfo("m")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o555
        tar.addfile(folder)
        info = tarfile.TarInfo("m/model.py")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    extract_stream(_Unseekable(buffer.getvalue()), tmp_path / "model", None)
    assert (tmp_path / "model" / "m" / "model.py").read_bytes() == b"ok"


def test_folder_source_streams_and_refuses_what_s3_would_not_have(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "a.tar.gz").write_bytes(b"abc")
    source = FolderSource(tmp_path / "store")
    with source.open("a.tar.gz") as stream:
        assert stream.read() == b"abc"
    for missing in ("b.tar.gz", "../store/a.tar.gz", "x" * 5000):
        with pytest.raises(ObjectNotFound), source.open(missing):
            pass


def test_folder_source_serves_a_tarball_linked_into_the_store(tmp_path: Path) -> None:
    """A store folder may link a tarball from elsewhere (``mme serve`` links a store's tarballs
    beside the model folders it packages); the key still cannot climb out of the store."""
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "a.tar.gz").write_bytes(b"abc")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "a.tar.gz").symlink_to(tmp_path / "build" / "a.tar.gz")
    source = FolderSource(tmp_path / "store")
    with source.open("a.tar.gz") as stream:
        assert stream.read() == b"abc"
    assert source.fetch("a.tar.gz", tmp_path / "copy") == 3
    assert source.version("a.tar.gz") is not None
    for escaping in ("../build/a.tar.gz", "/build/a.tar.gz", "./a.tar.gz"):
        with pytest.raises(ObjectNotFound), source.open(escaping):
            pass


def test_s3_stream_resumes_after_a_broken_connection(s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.bucket("stream-resume")
    payload = os.urandom(3 * 1024 * 1024)
    s3_server.client.put_object(Bucket=bucket, Key="mme/big.tar.gz", Body=payload)
    source = S3Source(f"s3://{bucket}/mme/", endpoint_url=s3_server.endpoint_url)
    received = bytearray()
    with source.open("big.tar.gz") as stream:
        received += stream.read(1024 * 1024)
        # Break the connection under the reader, as a reset would: the next read resumes.
        stream._raw._body.close()  # type: ignore[attr-defined]
        while chunk := stream.read(256 * 1024):
            received += chunk
    assert bytes(received) == payload
    with pytest.raises(ObjectNotFound), source.open("absent.tar.gz"):
        pass


def test_progress_is_a_bar_on_a_terminal_and_silent_elsewhere(caplog) -> None:  # type: ignore[no-untyped-def]
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, pipe = Terminal(), io.StringIO()
    caplog.set_level(logging.DEBUG, logger="emulator")
    import emulator.manager.sources as store

    store.BAR_DELAY_S, delay = 0.0, store.BAR_DELAY_S
    try:
        for out in (terminal, pipe):
            with progress_bar("big.tar.gz", 100 * 1024**2, out) as tick:
                for _ in range(10):
                    tick(10 * 1024**2)
    finally:
        store.BAR_DELAY_S = delay
    assert "downloading big.tar.gz" in terminal.getvalue() and "100M" in terminal.getvalue()
    assert pipe.getvalue() == ""
    assert not [r for r in caplog.records if "download" in r.getMessage()]
