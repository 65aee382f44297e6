"""undoproxy/codings.py: HTTP content codings only, decoded within a size and a ratio cap."""

from __future__ import annotations

import bz2
import gzip
import zlib
from collections.abc import Callable

import brotli  # type: ignore[import-untyped]
import pytest
import zstandard

from undoproxy.codings import MAX_STACKED, StreamDecoder, decode, parse
from undoproxy.limits import MAX_DECODED, MAX_RATIO, RATIO_FLOOR, MiB


def gz(data: bytes, level: int = 9) -> bytes:
    """gzip with no timestamp: the same bytes in every process (test ids are built from
    them, and pytest-xdist's workers must collect the same ids)."""
    return gzip.compress(data, level, mtime=0)


BODY = b'{"amount": 5}'
ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda b: gz(b),
    "x-gzip": lambda b: gz(b),
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
}


@pytest.mark.parametrize(
    ("values", "codings"),
    [
        ([], ()),
        ([""], ()),
        (["identity"], ()),
        (["gzip"], ("gzip",)),
        (["GZip , gzip"], ("gzip", "gzip")),
        (["gzip", "br"], ("gzip", "br")),  # two fields are one list
        (["identity, x-gzip"], ("x-gzip",)),
        (["bz2"], ("bz2",)),
    ],
)
def test_parse(values: list[str], codings: tuple[str, ...]) -> None:
    assert parse(values) == codings


@pytest.mark.parametrize("coding", list(ENCODERS))
def test_each_http_coding_is_decoded(coding: str) -> None:
    assert decode(ENCODERS[coding](BODY), (coding,)).body == BODY


@pytest.mark.parametrize(
    ("codings", "data"),
    [
        (("gzip", "gzip"), gz(gz(BODY))),
        (("gzip", "br"), brotli.compress(gz(BODY))),  # br applied last: undone first
        (("deflate",), zlib.compress(BODY)[2:-4]),  # raw deflate, as some clients send it
        (("gzip",), gz(BODY) + gz(BODY)),  # two gzip members
        (("zstd",), zstandard.ZstdCompressor().compress(BODY) * 2),  # two zstd frames
        ((), BODY),
    ],
)
def test_stacked_and_multi_part_bodies(codings: tuple[str, ...], data: bytes) -> None:
    decoded = decode(data, codings)
    assert decoded.problem is None
    assert decoded.body in (BODY, BODY * 2)


@pytest.mark.parametrize(
    ("codings", "data", "problem"),
    [
        (("bz2",), bz2.compress(BODY), "not an HTTP content coding"),
        (("base64",), b"eyJhbW91bnQiOiA1fQ==", "not an HTTP content coding"),
        (("gzip",), BODY, "not gzip at the start"),
        (("gzip",), gz(BODY)[:-5], "truncated"),
        (("gzip",), gz(BODY) + b"junk", "after the end of the gzip data"),
        (("deflate",), zlib.compress(BODY) + b"junk", "after the end of the deflate"),
        (("br",), brotli.compress(BODY)[:-2], "truncated"),
        (("br",), b"\xff\xff\xff\xff", "corrupt br"),
        (("zstd",), zstandard.ZstdCompressor().compress(BODY)[:-3], "truncated"),
        (("zstd",), b"not zstd", "zstd frame"),
        (("gzip",) * (MAX_STACKED + 1), b"x", "stacked"),
    ],
)
def test_what_cannot_be_decoded_is_kept_as_sent_with_its_problem(
    codings: tuple[str, ...], data: bytes, problem: str
) -> None:
    decoded = decode(data, codings)
    assert decoded.body == data
    assert decoded.problem is not None and problem in decoded.problem


def _zeros(size: int, coding: str) -> bytes:
    if coding == "gzip":
        return gz(b"\0" * size)
    if coding == "br":
        return brotli.compress(b"\0" * size, quality=5)
    return zstandard.ZstdCompressor().compress(b"\0" * size)


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_bomb_is_stopped(coding: str) -> None:
    decoded = decode(_zeros(64 * MiB, coding), (coding,))
    assert decoded.problem is not None
    assert "bomb" in decoded.problem or "too large" in decoded.problem


def test_the_size_cap_at_the_limit_and_one_past_it() -> None:
    # Random bytes do not compress: only the size cap can stop them, not the ratio.
    import os

    body = os.urandom(MAX_DECODED)
    at = decode(gz(body, 1), ("gzip",))
    assert at.problem is None and at.body == body
    past = decode(gz(body + b"x", 1), ("gzip",))
    assert past.problem is not None and "too large" in past.problem
    assert decode(body, ()).problem is None
    assert "too large" in (decode(body + b"x", ()).problem or "")


def test_the_ratio_cap_at_the_limit_and_one_past_it() -> None:
    # An encoded body of n bytes may decode into ratio * n bytes and no more (past the floor).
    body = b" " * (3 * MiB)
    packed = gz(body)
    at = -(-len(body) // len(packed))  # the smallest ratio that lets it through
    assert decode(packed, ("gzip",), ratio=at, floor=0).problem is None
    past = decode(packed, ("gzip",), ratio=at - 1, floor=0).problem
    assert past is not None and "bomb" in past
    # Under the floor no ratio is checked: a small body may inflate far more, harmlessly.
    assert len(body) // len(packed) > MAX_RATIO
    assert decode(packed, ("gzip",), floor=len(body)).problem is None
    assert decode(packed, ("gzip",), floor=RATIO_FLOOR).problem is not None


def test_a_stream_is_decoded_piece_by_piece_without_a_size_limit() -> None:
    events = b"".join(f"data: {i}\n\n".encode() for i in range(200_000))  # ~2.3 MiB
    packed = gz(events)
    decoder = StreamDecoder(("gzip",), limit=None, piece=4096)
    out = bytearray()
    for i in range(0, len(packed), 1000):
        for piece in decoder.feed(packed[i : i + 1000]):
            assert len(piece) <= 4096
            out += piece
    decoder.finish()
    assert bytes(out) == events
