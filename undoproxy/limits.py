"""How much of a body undoproxy holds, decodes and reads: every such limit, in one place.

Each number here has a test at the limit and one past it (tests/test_codings.py,
tests/proxy/test_body_limits.py, tests/proxy/test_bombs.py, tests/test_bodyfiles.py). What
happens past each one:

    MAX_REQUEST_BODY      the agent gets 413 `undoproxy_body_too_large`; nothing is forwarded
                          and no more of the body is read (the connection is closed). The
                          config's `proxy.max_body` sets it; a snapshot larger than it fails
    SPOOL_REQUEST_OVER    the request body is judged as a body too large to read (ambiguous):
                          on its headers, then streamed, or spooled to an encrypted file instead
                          of memory and sent from there (proxy/bounded.py says which)
    STREAM_RESPONSE_OVER  the response is passed to the agent as it arrives, not buffered
                          (the journal keeps its first bytes, length and SHA-256)
    SNAPSHOT_IN_JOURNAL   a snapshot is kept in an encrypted body file, not in the journal row
    READ_BODY_LIMIT,      what the journal keeps of a read's / a mutation's bodies (the rest
    MUTATION_BODY_LIMIT   is known by its length and SHA-256)
    MAX_DECODED           the body is not decoded further: the rules see it as ambiguous
                          (a hold or deny rule that could match it, does)
    MAX_RATIO             the same, as soon as a body inflates more than this many times

What undoproxy reads of the answers to its own requests (snapshots, read-backs) is bounded in
undoproxy/upstream.py (`KEEP`; never decoded, so a compressed bomb costs only its own size).
"""

from __future__ import annotations

from typing import Final

MiB: Final = 1024 * 1024

GiB: Final = 1024 * MiB

MAX_REQUEST_BODY: Final = 8 * GiB
"""The largest request body undoproxy takes (spooled to disk), and the largest snapshot it
keeps; `proxy.max_body` in the config overrides it."""

SPOOL_REQUEST_OVER: Final = 16 * MiB
"""A request body bigger than this is never held in memory: judged on its headers and
streamed, or spooled to disk while it arrives (memory per transfer stays about this size,
whatever the body's)."""

SNAPSHOT_IN_JOURNAL: Final = 10 * MiB
"""A snapshot bigger than this is kept in an encrypted body file in the state dir."""

READ_BODY_LIMIT: Final = 64 * 1024
"""What the journal keeps of a read's request and response bodies."""

MUTATION_BODY_LIMIT: Final = 1 * MiB
"""What the journal keeps of a mutation's bodies (compensations and drift checks use them)."""

STREAM_RESPONSE_OVER: Final = 1 * MiB
"""A response bigger than this (announced, or once that much has arrived) streams through."""

MAX_DECODED: Final = 8 * MiB
"""The most a content coding may decode into before the body counts as too large to judge."""

MAX_RATIO: Final = 100
"""Decoded bytes per encoded byte past which a body is a decompression bomb..."""

RATIO_FLOOR: Final = 1 * MiB
"""...once it has decoded into more than this (a tiny body may inflate far more, harmlessly)."""

DECODE_IN_THREAD_OVER: Final = 64 * 1024
"""Encoded bodies bigger than this are decoded in a worker thread, off the event loop."""
