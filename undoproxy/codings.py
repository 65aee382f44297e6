"""HTTP content codings, decoded within limits: the body undoproxy judges.

Rules must see a body as the upstream will read it, and an upstream that honours
`Content-Encoding` reads it decoded. undoproxy decodes exactly the codings HTTP defines for
that header (RFC 9110 §8.4.1 and the IANA registry): `gzip` and its alias `x-gzip`, `deflate`
(zlib-wrapped, or raw as some clients send it), `br`, `zstd` (RFC 9659: windows up to 8 MiB)
and `identity`. Stacked codings are decoded in the reverse of the order they are listed in
(`gzip, gzip` twice), several header fields read as one list. Nothing else is decoded:
mitmproxy's own `get_content()` also runs any Python codec a header names (`bz2`, `base64`,
`zlib_codec`...), whole, on the event loop, with no cap.

Every stage decodes incrementally and is stopped once it has produced more than `limit` bytes
or, past `floor` bytes, more than `ratio` times what it was given (a decompression bomb), so
memory stays bounded by the limit plus one piece: zlib output comes in pieces of at most
`piece` bytes; brotli and zstd, whose Python bindings have no output cap, are fed a few bytes
at a time, which bounds one call's output by one brotli window (16 MiB) or a few zstd blocks.

A body that cannot be decoded, whatever the reason (a coding that is not an HTTP coding,
corrupt or truncated data, data after the end, a bomb, too large), is returned as it was sent
with its `problem` said: undoproxy then treats it as ambiguous, as it does a JSON body with
duplicate keys (a hold or deny rule that could match it, does).

    decode(raw, parse(header_values)) -> Decoded          a whole body
    StreamDecoder(codings, ratio=...).feed(chunk) -> pieces    a stream, as it passes
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from undoproxy.limits import MAX_DECODED, MAX_RATIO, RATIO_FLOOR

HTTP_CODINGS = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "identity"})
MAX_STACKED = 4  # more codings than this on one body are refused, not decoded
PIECE = 64 * 1024  # the most one zlib step returns at once
ZSTD_WINDOW = 8 * 1024 * 1024  # RFC 9659: a zstd content coding never needs more
_BROTLI_SLICE = 8  # bytes of input per call: one call then yields at most ~one 16 MiB window
_ZSTD_SLICE = 64  # bytes of input per call: at most a few 128 KiB blocks
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class Undecodable(ValueError):
    """The data is not what its coding says (corrupt, truncated, trailing bytes, unknown)."""


class TooLarge(Undecodable):
    """Decoding was stopped: over the size limit, or inflating like a bomb."""


@dataclass(frozen=True)
class Decoded:
    """A body as undoproxy judges it: decoded, or as sent with the reason it could not be."""

    body: bytes
    problem: str | None = None
    codings: tuple[str, ...] = ()  # as applied by the sender, outermost last


def parse(values: Iterable[str]) -> tuple[str, ...]:
    """The codings that `Content-Encoding` field values name, in the order applied, lower-case,
    without `identity` (several fields read as one comma-separated list, RFC 9110 §5.3)."""
    names: list[str] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower()
            if name and name != "identity":
                names.append(name)
    return tuple(names)


def decode(
    raw: bytes,
    codings: Sequence[str],
    *,
    limit: int = MAX_DECODED,
    ratio: int = MAX_RATIO,
    floor: int = RATIO_FLOOR,
) -> Decoded:
    """`raw` decoded through `codings` (see `parse`), or as sent with the problem said."""
    applied = tuple(codings)
    if not applied:
        if len(raw) > limit:
            return Decoded(raw, f"the body is larger than {limit} bytes: too large to judge")
        return Decoded(raw)
    problem = unsupported(applied)
    if problem is not None:
        return Decoded(raw, problem, applied)
    out = bytearray()
    try:
        decoder = StreamDecoder(applied, limit=limit, ratio=ratio, floor=floor)
        for piece in decoder.feed(raw):
            out += piece
        decoder.finish()
    except TooLarge as exc:
        return Decoded(raw, f"Content-Encoding {', '.join(applied)}: {exc}", applied)
    except Undecodable as exc:
        why = f"Content-Encoding {', '.join(applied)} cannot be decoded: {exc}"
        return Decoded(raw, why, applied)
    return Decoded(bytes(out), None, applied)


def unsupported(codings: Sequence[str]) -> str | None:
    """Why these codings are not decoded at all, or None when they all are HTTP codings."""
    for name in codings:
        if name not in HTTP_CODINGS:
            return (
                f"Content-Encoding {name!r} is not an HTTP content coding: undoproxy does not "
                "decode it, so it cannot judge the body"
            )
    if len(codings) > MAX_STACKED:
        return f"{len(codings)} stacked content codings (undoproxy decodes at most {MAX_STACKED})"
    return None


class _Stage(Protocol):
    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def finish(self) -> None: ...


class StreamDecoder:
    """Decodes a body piece by piece as it arrives; raises Undecodable (TooLarge past a limit).

    `limit=None` sets no size limit (a stream passing through may be long), only the ratio.
    """

    def __init__(
        self,
        codings: Sequence[str],
        *,
        limit: int | None = MAX_DECODED,
        ratio: int = MAX_RATIO,
        floor: int = RATIO_FLOOR,
        piece: int = PIECE,
    ) -> None:
        problem = unsupported(codings)
        if problem is not None:
            raise Undecodable(problem)
        # The last coding listed was applied last: it is taken off first.
        self.stages: list[_Stage] = [_stage(name, piece) for name in reversed(codings)]
        self.limit = limit
        self.ratio = ratio
        self.floor = floor
        self.given = [0] * len(self.stages)  # bytes each stage was fed
        self.made = [0] * len(self.stages)  # bytes each stage produced

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The decoded pieces of the next chunk of the body as sent."""
        pieces: Iterator[bytes] = iter((chunk,))
        for i in range(len(self.stages)):
            pieces = self._through(i, pieces)
        return pieces

    def _through(self, i: int, pieces: Iterator[bytes]) -> Iterator[bytes]:
        stage = self.stages[i]
        for data in pieces:
            self.given[i] += len(data)
            for out in stage.feed(data):
                self.made[i] += len(out)
                self._check(i)
                yield out

    def _check(self, i: int) -> None:
        made = self.made[i]
        if self.limit is not None and made > self.limit:
            raise TooLarge(f"decodes into more than {self.limit} bytes: too large to judge")
        if made > self.floor and made > self.ratio * max(self.given[i], 1):
            raise TooLarge(
                f"inflates more than {self.ratio} times ({self.given[i]} bytes into more than "
                f"{made}): a decompression bomb"
            )

    def finish(self) -> None:
        """The body is complete: raises Undecodable when a stage stopped in the middle."""
        for stage in self.stages:
            stage.finish()


def _stage(name: str, piece: int) -> _Stage:
    if name in ("gzip", "x-gzip", "deflate"):
        return _Zlib(name, piece)
    if name == "br":
        return _Brotli()
    if name == "zstd":
        return _Zstd()
    raise Undecodable(f"no decoder for {name!r}")  # identity is dropped by parse()


class _Zlib:
    """gzip (several members allowed, as RFC 1952 does) and deflate (zlib or raw)."""

    def __init__(self, name: str, piece: int) -> None:
        self.name = name
        self.gzip = name != "deflate"
        self.piece = piece
        self.obj: Any = None  # zlib's Decompress object of the current member
        self.ended = False  # a member ended and no other began

    def _start(self, data: bytes) -> None:
        if self.gzip:
            if not data.startswith(_GZIP_MAGIC[: len(data)]):
                where = "after the end of the gzip data" if self.ended else "at the start"
                raise Undecodable(f"bytes that are not gzip {where}")
            self.obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self.obj = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            if self.obj is None:
                if self.ended and not self.gzip:
                    raise Undecodable("data after the end of the deflate stream")
                self._start(data)
            out = self._inflate(data)
            if out:
                yield out
            # All input taken and a full piece out: zlib may still hold output for it.
            while not self.obj.eof and not self.obj.unconsumed_tail and len(out) == self.piece:
                out = self._inflate(b"")
                if out:
                    yield out
            if self.obj.eof:
                data = self.obj.unused_data
                self.obj, self.ended = None, True
            else:
                data = self.obj.unconsumed_tail

    def _inflate(self, data: bytes) -> bytes:
        try:
            return bytes(self.obj.decompress(data, self.piece))
        except zlib.error as exc:
            raise Undecodable(f"corrupt {self.name} data ({exc})") from None

    def finish(self) -> None:
        if self.obj is not None:
            raise Undecodable(f"the {self.name} data is truncated")


class _Brotli:
    def __init__(self) -> None:
        import brotli  # type: ignore[import-untyped]  # a dependency of mitmproxy

        self.error = brotli.error
        self.obj = brotli.Decompressor()
        self.fed = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), _BROTLI_SLICE):
            self.fed = True
            try:
                out = self.obj.process(data[start : start + _BROTLI_SLICE])
            except self.error as exc:
                raise Undecodable(f"corrupt br data ({exc})") from None
            if out:
                yield out

    def finish(self) -> None:
        if self.fed and not self.obj.is_finished():
            raise Undecodable("the br data is truncated")


class _Zstd:
    """zstd frames one after another (RFC 8878), each with a window of at most 8 MiB."""

    def __init__(self) -> None:
        import zstandard  # a dependency of mitmproxy

        self.error = zstandard.ZstdError
        self.decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_WINDOW)
        self.obj: Any = None

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            if self.obj is None:
                if not data.startswith(_ZSTD_MAGIC[: len(data)]):
                    raise Undecodable("zstd data does not start with a zstd frame")
                self.obj = self.decompressor.decompressobj()
            for start in range(0, len(data), _ZSTD_SLICE):
                try:
                    out = self.obj.decompress(data[start : start + _ZSTD_SLICE])
                except self.error as exc:
                    raise Undecodable(f"corrupt zstd data ({exc})") from None
                if out:
                    yield out
                if self.obj.eof:
                    data = self.obj.unused_data + data[start + _ZSTD_SLICE :]
                    self.obj = None
                    break
            else:
                data = b""

    def finish(self) -> None:
        if self.obj is not None:
            raise Undecodable("the zstd data is truncated")
