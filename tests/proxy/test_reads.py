"""Connections are read in pieces of up to 256 KiB (proxy/reads.py), not mitmproxy's 64 KiB:
a read takes whatever has gathered, so a busy event loop handles a large transfer in fewer,
larger events; nothing is lost or reordered, and a read never waits for more than is there.

The reader is asyncio's own StreamReader fed as a socket would feed it; that every transfer
through a running undoproxy arrives whole with it in place is what the rest of the suite
checks (tests/proxy/test_judged_uploads.py, test_body_limits.py, test_http2.py...)."""

from __future__ import annotations

import asyncio
import os

from undoproxy.proxy.reads import BUFFER, READ, _WideReader


def _reader() -> _WideReader:
    reader = asyncio.StreamReader()
    reader.__class__ = _WideReader
    reader._limit = BUFFER  # type: ignore[attr-defined]
    return reader  # type: ignore[return-value]


def test_a_read_takes_what_gathered_up_to_the_wide_size_in_order() -> None:
    async def go() -> tuple[list[int], bytes, bytes]:
        reader = _reader()
        sent = os.urandom(3 * READ + 1234)
        for i in range(0, len(sent), 64 * 1024):  # the socket delivers 64 KiB at a time
            reader.feed_data(sent[i : i + 64 * 1024])
        reader.feed_eof()
        sizes, got = [], b""
        while piece := await reader.read(65535):  # what mitmproxy asks for
            sizes.append(len(piece))
            got += piece
        return sizes, got, sent

    sizes, got, sent = asyncio.run(go())
    assert got == sent
    assert sizes == [READ, READ, READ, 1234]


def test_a_read_returns_what_is_there_without_waiting_for_more() -> None:
    async def go() -> bytes:
        reader = _reader()
        reader.feed_data(b"a small request")
        return await asyncio.wait_for(reader.read(65535), timeout=5)

    assert asyncio.run(go()) == b"a small request"
