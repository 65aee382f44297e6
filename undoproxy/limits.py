"""How much of a body undoproxy holds, decodes and reads: every such limit, in one place.

Each number here has a test at the limit and one past it (tests/test_codings.py,
tests/proxy/test_body_limits.py, tests/proxy/test_bombs.py). What happens past each one:

    MAX_REQUEST_BODY      the agent gets 413 `undoproxy_body_too_large`; nothing is forwarded
                          and no more of the body is read (the connection is closed)
    STREAM_RESPONSE_OVER  the response is passed to the agent as it arrives, not buffered
                          (its body is then not journaled)
    MAX_DECODED           the body is not decoded further: the rules see it as ambiguous
                          (a hold or deny rule that could match it, does)
    MAX_RATIO             the same, as soon as a body inflates more than this many times

What undoproxy reads of the answers to its own requests (snapshots, read-backs) is bounded in
undoproxy/upstream.py (`KEEP`; never decoded, so a compressed bomb costs only its own size).
"""

from __future__ import annotations

from typing import Final

MiB: Final = 1024 * 1024

MAX_REQUEST_BODY: Final = 32 * MiB
"""The largest request body undoproxy buffers to judge (spooling bigger ones is issue #23)."""

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
