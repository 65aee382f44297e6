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

The compensations are the rollback's critical path, so a step's verification read waits
until the next step's compensation has gone out (or the lane knows none will go while it
waits): an upstream that serves one request at a time then answers the compensation first,
instead of making it queue behind the read.
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


class Turn:
    """One step's place in the lane. Its undo tells `sending()` as its compensation goes out
    and `answered()` once it was answered (the next step may start then), and awaits
    `next_sent()` before its verification read."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._answered: asyncio.Future[None] = loop.create_future()
        self._sent: asyncio.Future[None] = loop.create_future()
        self._next_sent: asyncio.Future[None] = loop.create_future()

    def sending(self) -> None:
        """The step's compensation goes out now."""
        _resolve(self._sent)

    def answered(self) -> None:
        """The step's compensation was answered."""
        _resolve(self._answered)

    async def next_sent(self) -> None:
        """Return once the next step's compensation went out, or none will while we wait."""
        await self._next_sent

    def ended(self, *_: object) -> None:
        """The undo ended: whatever it did not tell, it will not do now."""
        _resolve(self._sent)
        _resolve(self._answered)

    async def until_answered(self) -> None:
        """Return once the compensation was answered (or the undo ended without one)."""
        await self._answered

    def when_sent(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the compensation went out (or the undo ended without one)."""
        self._sent.add_done_callback(lambda _: callback())

    def release(self) -> None:
        """Let `next_sent()` return: the next step's compensation went out, or none will
        while this step waits for it."""
        _resolve(self._next_sent)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


Undo = Callable[[Turn], Coroutine[Any, Any, StepResult]]


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
        self._last: Turn | None = None  # the newest step in flight, its read waiting for ours

    async def start(self, touched: frozenset[str] | None, undo: Undo) -> None:
        """Run `undo` once the steps in flight allow it; return when its compensation was
        answered (or when it finished, if it may not overlap)."""
        if self._blocked(touched):
            self._release()  # the lane waits for the steps in flight: their reads go now
            while self._blocked(touched):
                await asyncio.wait(
                    {t for t, _ in self._running}, return_when=asyncio.FIRST_COMPLETED
                )
        loop = asyncio.get_running_loop()
        turn = Turn(loop)
        task = loop.create_task(undo(turn), name="rollback-step")
        self._queue.append(task)
        # Finished without sending anything: that, too, lets the next step start.
        task.add_done_callback(turn.ended)
        if self._last is not None:  # the step before reads once this one's undo went out
            turn.when_sent(self._last.release)
            self._last = None
        if touched is None or not self.overlap:
            turn.release()  # it runs alone: nothing comes next while it runs
            await asyncio.wait({task})
            return
        await turn.until_answered()
        if not task.done():
            self._running.append((task, touched))
            self._last = turn

    def _blocked(self, touched: frozenset[str] | None) -> bool:
        """True while a step touching `touched` may not start beside the steps in flight."""
        self._running = [(t, r) for t, r in self._running if not t.done()]
        return bool(self._running) and (
            touched is None
            or not self.overlap
            or len(self._running) >= self.window
            or not all(independent(touched, r) for _, r in self._running)
        )

    def _release(self) -> None:
        if self._last is not None:
            self._last.release()
            self._last = None

    def finished(self) -> list[StepResult]:
        """The results ready to report, in LIFO order (stops at the first still running)."""
        out = []
        while self._queue and self._queue[0].done():
            out.append(self._queue.pop(0).result())
        return out

    async def drain(self) -> list[StepResult]:
        """Wait for every step still in flight; their results in order."""
        self._release()
        if self._queue:
            await asyncio.wait(set(self._queue))
        return self.finished()

    async def cancel(self) -> None:
        """Stop what is still running (the run itself failed)."""
        self._release()
        for task in self._queue:
            task.cancel()
        if self._queue:
            await asyncio.wait(set(self._queue))
        self._queue.clear()
        self._running.clear()
