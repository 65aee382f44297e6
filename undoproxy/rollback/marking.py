"""Marking steps `compensating` ahead of their turn, the next window's commit in the background.

Each compensation is durably marked `compensating` before it is sent (a crash from then on is
decided by reading the target, never by sending again). Marking one step per commit would
cost a commit, and its fsync, per step; `Rollback._mark_ahead` marks a window of steps in one
commit instead. Waiting for that commit at the start of each window still stalled the lane
(about 12 ms of fsync per 64 steps, a fifth of a rollback's time), so the next window is
committed while the current one is undone: a step waits only when its own window's commit
has not landed yet. Marking early is safe for the same reason marking a window is: a step
marked but not yet sent when undoproxy stops is decided by a read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from undoproxy.store.records import Step

WINDOW = 64  # steps marked in one commit


class AheadMarks:
    """Requests the marks of `order` window by window, one window ahead of the lane."""

    def __init__(
        self,
        order: Sequence[Step],
        mark: Callable[[list[Step]], Awaitable[None]],
        window: int = WINDOW,
    ) -> None:
        self.order = order
        self.mark = mark  # marks what it can of a window; never raises for a journal error
        self.window = window
        self._windows: list[tuple[int, asyncio.Task[None]]] = []  # (end index, its commit)
        self._requested = 0  # order[:_requested] have been handed to `mark`
        self._tasks: list[asyncio.Task[None]] = []  # every commit requested

    async def reach(self, at: int, wait: bool) -> None:
        """Step `at` is next: request its window and, from its middle on, the next one; when
        `wait` (the step must be marked before it is sent), return once its window's commit
        has landed (whether the step could be marked or not: see `Rollback._mark_ahead`)."""
        while self._requested <= at:
            self._request()
        if self._requested - at <= self.window // 2 and self._requested < len(self.order):
            self._request()  # the next window, committed while this one is undone
        self._windows = [(end, task) for end, task in self._windows if end > at]  # passed
        if wait:  # the first window left is the step's own
            await asyncio.shield(self._windows[0][1])

    def _request(self) -> None:
        start, end = self._requested, min(self._requested + self.window, len(self.order))
        self._requested = end
        previous = self._tasks[-1] if self._tasks else None
        task = asyncio.get_running_loop().create_task(
            self._after(previous, list(self.order[start:end])), name="rollback-mark-ahead"
        )
        self._windows.append((end, task))
        self._tasks.append(task)

    async def _after(self, previous: asyncio.Task[None] | None, steps: list[Step]) -> None:
        if previous is not None:  # in order: one commit at a time
            with contextlib.suppress(Exception):
                await asyncio.shield(previous)
        await self.mark(steps)

    async def finish(self) -> None:
        """Wait for every commit requested (a window past the last step sent still lands)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cancel(self) -> None:
        """The run failed: stop what has not been committed yet."""
        for task in self._tasks:
            task.cancel()
        await self.finish()
