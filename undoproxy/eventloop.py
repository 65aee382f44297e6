"""The event loop `undoproxy run` serves on: uvloop when it is installed, else asyncio's own.

Most of a proxied request's CPU is event-loop work (mitmproxy's connection handling, one task
per hook, the journal's callbacks); uvloop, asyncio's interface on libuv, does that work in C
and cut undoproxy's CPU per journaled mutation by about a sixth on the development machine
(bench/README.md). It is a dependency wherever it builds (not on Windows).
`UNDOPROXY_EVENT_LOOP=asyncio` picks asyncio's loop anyway (to rule uvloop out when chasing
a problem); `uvloop` insists on uvloop. `/api/info` says which loop a running undoproxy uses.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from undoproxy.errors import UndoproxyError

ENV = "UNDOPROXY_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")
T = TypeVar("T")


def factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """How to make the loop (None: asyncio's default); UndoproxyError for a bad choice."""
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted and wanted not in CHOICES:
        raise UndoproxyError(f"{ENV}={wanted!r}: expected one of {', '.join(CHOICES)}")
    if wanted == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise UndoproxyError(f"{ENV}=uvloop, but uvloop is not installed") from None
        return None
    new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on the chosen loop (like asyncio.run)."""
    try:
        make = factory()
    except UndoproxyError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=make) as runner:
        return runner.run(main)


def name(loop: asyncio.AbstractEventLoop) -> str:
    """ "uvloop" or "asyncio": which loop `loop` is."""
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"
