"""Rollback's lane: compensations go out one at a time, newest first; a step's verification
read may overlap the next step's compensation when the two cannot touch each other.

LIFO is about effects: step N's inverse request is answered before step N-1's is sent, always.
What may overlap is only N's verification read (and its result write) with N-1's work, and
only where nothing N-1 does can change what N reads:
- both steps undo one resource each, with a plain inverse request (restore, recreate,
  delete-created, or a rule's template: no further requests, no correction, no pack whose
  undo spans several resources);
- their resources are on different origins, or their paths are neither equal nor one inside
  the other (`/items/7` and `/items/8` may overlap; `/docs` and `/docs/a.txt` never do).
Anything else waits until every step in flight is done. At most WINDOW steps are in flight.
A step's result is reported (and its progress told) in LIFO order whatever order the reads
finish in. Overlap halves the time of a rollback of many independent resources: each step
costs one round trip instead of two (see bench/README.md).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

from undoproxy.compensators.record import CompensationRecord
from undoproxy.rollback.report import StepResult

WINDOW = 4
SINGLE = frozenset({"restore", "recreate", "delete-created", "template"})


class Answered:
    """Told (`set()`) by a step's undo once its compensation was answered: the next step may
    start then."""

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    def set(self) -> None:
        """The compensation was answered."""
        if not self._future.done():
            self._future.set_result(None)


Undo = Callable[[Answered], Coroutine[Any, Any, StepResult]]


def targets(comp: CompensationRecord) -> frozenset[str] | None:
    """The resources a step's undo (`comp`, its compensation record) touches, or None when
    that cannot be told (it runs alone). A step with nothing to send touches nothing (an
    empty set).
    """
    if comp.request is None:
        return frozenset()
    if comp.kind not in SINGLE or comp.then or comp.correction or comp.readback is not None:
        return None
    return frozenset(u for u in (comp.snapshot_url, comp.request.url) if u)


def independent(a: frozenset[str], b: frozenset[str]) -> bool:
    """True when no resource of `a` is, contains or lies inside a resource of `b`."""
    return not any(_related(x, y) for x in a for y in b)


def _related(x: str, y: str) -> bool:
    (ox, a), (oy, b) = _place(x), _place(y)
    return ox == oy and (a.startswith(b) or b.startswith(a))


@functools.lru_cache(maxsize=4096)
def _place(url: str) -> tuple[tuple[str, str], str]:
    """(scheme and host, path ending in '/') of a URL: what `_related` compares."""
    parts = urlsplit(url)
    return (parts.scheme, parts.netloc.lower()), parts.path.rstrip("/") + "/"


class Lane:
    """Starts each step's undo in order; `finished()` hands results back in the same order."""

    def __init__(self, overlap: bool, window: int = WINDOW) -> None:
        self.overlap = overlap  # off for a dry run: it sends nothing, so nothing to overlap
        self.window = window
        self._queue: list[asyncio.Task[StepResult]] = []  # not yet handed back, in order
        self._running: list[tuple[asyncio.Task[StepResult], frozenset[str]]] = []

    async def start(self, touched: frozenset[str] | None, undo: Undo) -> None:
        """Run `undo` once the steps in flight allow it; return when its compensation was
        answered (or when it finished, if it may not overlap)."""
        self._running = [(t, r) for t, r in self._running if not t.done()]
        while self._running and (
            touched is None
            or not self.overlap
            or len(self._running) >= self.window
            or not all(independent(touched, r) for _, r in self._running)
        ):
            await asyncio.wait({t for t, _ in self._running}, return_when=asyncio.FIRST_COMPLETED)
            self._running = [(t, r) for t, r in self._running if not t.done()]
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        task = loop.create_task(undo(Answered(answered)), name="rollback-step")
        self._queue.append(task)
        if touched is None or not self.overlap:
            await asyncio.wait({task})
            return
        # Answered, or finished without sending anything: either lets the next step start.
        task.add_done_callback(lambda _: Answered(answered).set())
        await answered
        if not task.done():
            self._running.append((task, touched))

    def finished(self) -> list[StepResult]:
        """The results ready to report, in LIFO order (stops at the first still running)."""
        out = []
        while self._queue and self._queue[0].done():
            out.append(self._queue.pop(0).result())
        return out

    async def drain(self) -> list[StepResult]:
        """Wait for every step still in flight; their results in order."""
        if self._queue:
            await asyncio.wait(set(self._queue))
        return self.finished()

    async def cancel(self) -> None:
        """Stop what is still running (the run itself failed)."""
        for task in self._queue:
            task.cancel()
        if self._queue:
            await asyncio.wait(set(self._queue))
        self._queue.clear()
        self._running.clear()
