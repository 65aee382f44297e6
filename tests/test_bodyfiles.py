"""Body files: what goes in comes out, in bounded records; anything edited, cut, reordered or
sealed under another key is refused, never replayed in part; spool files leave nothing on
disk; names cannot leave the body directory."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from undoproxy.bodyfiles import (
    RECORD,
    BodyFileError,
    BodyFiles,
    BodyWriter,
    FileBody,
    Spool,
    chunks,
    new_key,
)


def _write(data: bytes, key: bytes, keep: int = 0, piece: int = 65536) -> io.BytesIO:
    f = io.BytesIO()
    writer = BodyWriter(f, key, keep)
    for i in range(0, len(data), piece):
        writer.write(data[i : i + piece])
    copy = writer.finish()
    assert copy.length == len(data)
    assert copy.sha256 == hashlib.sha256(data).hexdigest()
    assert copy.head == data[:keep]
    return f


@pytest.mark.parametrize("size", [0, 1, RECORD - 1, RECORD, RECORD + 1, 3 * RECORD + 5])
# small reads, a socket's reads, a spool's start (what had arrived before it was a spool)
@pytest.mark.parametrize("piece", [1000, 65536, 5 * RECORD + 3])
def test_a_body_comes_back_as_written_in_records_of_at_most_one_mebibyte(
    size: int, piece: int
) -> None:
    key = new_key()
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    pieces = list(chunks(_write(data, key, keep=100, piece=piece), key))
    assert b"".join(pieces) == data
    assert all(0 < len(p) <= RECORD for p in pieces)


def _records(f: io.BytesIO) -> tuple[bytes, list[bytes]]:
    raw = f.getvalue()
    start, rest, out = raw[:16], raw[16:], []
    while rest:
        n = int.from_bytes(rest[:4], "big")
        out.append(rest[: 4 + n])
        rest = rest[4 + n :]
    return start, out


def _edited(how: str, f: io.BytesIO) -> bytes:
    start, records = _records(f)
    raw = f.getvalue()
    if how == "flipped byte":
        mid = len(raw) // 2
        return raw[:mid] + bytes([raw[mid] ^ 1]) + raw[mid + 1 :]
    if how == "last record dropped":
        return start + b"".join(records[:-1])
    if how == "cut inside a record":
        return raw[:-10]
    if how == "records swapped":
        return start + records[1] + records[0] + b"".join(records[2:])
    if how == "data appended":
        return raw + b"more"
    if how == "not a body file":
        return b"hello world, this is plain"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "flipped byte",
        "last record dropped",
        "cut inside a record",
        "records swapped",
        "data appended",
        "not a body file",
    ],
)
def test_an_edited_file_is_refused(how: str) -> None:
    key = new_key()
    f = _write(b"x" * (2 * RECORD + 7), key)
    with pytest.raises(BodyFileError):
        b"".join(chunks(io.BytesIO(_edited(how, f)), key))


def test_another_key_opens_nothing() -> None:
    f = _write(b"secret" * 1000, new_key())
    with pytest.raises(BodyFileError):
        list(chunks(f, new_key()))


def test_a_spool_leaves_no_file_behind(tmp_path: Path) -> None:
    spool = Spool(tmp_path, keep=4)
    spool.write(b"abcdef" * 100_000)
    copy = spool.finish()
    assert list(tmp_path.iterdir()) == []  # unlinked from the start
    assert copy.head == b"abcd" and copy.length == 600_000
    assert b"".join(spool.chunks()) == b"abcdef" * 100_000
    spool.close()


def test_body_files_are_kept_per_session_and_forgotten_with_it(tmp_path: Path) -> None:
    files = BodyFiles(tmp_path, new_key())
    name, writer = files.create("session one")
    writer.write(b"payload" * 10)
    copy = writer.finish()
    writer.file.close()
    ref = FileBody(name, copy.length, copy.sha256)
    assert FileBody.from_json(ref.to_json()) == ref
    assert b"".join(files.chunks(ref)) == b"payload" * 10
    assert list(files.sessions()) == ["session one"]
    assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    files.forget("session one")
    assert not files.exists(ref)
    with pytest.raises(BodyFileError):
        list(files.chunks(ref))


@pytest.mark.parametrize(
    "name", ["../credentials.key", "abc/../../x.body", "/etc/passwd", "abc/def.txt", "a/b/c.body"]
)
def test_a_name_that_is_not_a_body_file_is_refused(tmp_path: Path, name: str) -> None:
    files = BodyFiles(tmp_path, new_key())
    with pytest.raises(ValueError):
        files.path(name)
    assert not files.exists(FileBody(name, 1, "0" * 64))
