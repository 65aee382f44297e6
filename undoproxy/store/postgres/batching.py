"""Group commit on the event loop, for a writer whose database client is asynchronous.

`QueuedWriter` is a `Writer` (see `undoproxy.store.writer`: awaited and submitted writes,
timeouts, withdrawal) whose batches are gathered and run by one asyncio task: the PostgreSQL
writer's client (asyncpg) is itself asynchronous, so no thread is needed. A subclass says how
a batch is executed (`_execute`, in one transaction) and how the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from undoproxy.store.writer import BATCH_MAX, LINGER, Writer, _Op

log = logging.getLogger(__name__)


class QueuedWriter(Writer):
    """The queue and the task that commits whole batches; a backend runs one (`_execute`)."""

    def __init__(self, *, timeout: float = 5.0) -> None:
        super().__init__(timeout=timeout)
        self._queue: asyncio.Queue[_Op | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()  # someone waits for a commit: stop lingering

    def start(self) -> None:
        """Start the writer task."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journal-writer")

    async def close(self) -> None:
        """Commit what is queued, then stop."""
        if self._task is None:
            return
        self._queue.put_nowait(None)
        self._urgent.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await self._close()

    def _enqueue(self, op: _Op) -> None:
        self._queue.put_nowait(op)
        if op.done is not None:
            self._urgent.set()

    def _running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _close(self) -> None:
        """Close the backend's connection (the queue is drained)."""
        raise NotImplementedError

    async def _execute(self, batch: list[_Op]) -> None:
        """Execute a batch in one transaction, setting each op's `result`; raise on failure
        (nothing of the batch is then committed)."""
        raise NotImplementedError

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if (
                first is not None
                and first.done is None
                and not self._urgent.is_set()
                and self._queue.qsize() < BATCH_MAX
            ):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), LINGER)
            self._urgent.clear()  # before draining: a write queued after the drain sets it again
            ops: list[_Op] = []
            if first is None:
                stopping = True
            else:
                ops.append(first)
            while len(ops) < BATCH_MAX and not self._queue.empty():
                op = self._queue.get_nowait()
                if op is None:
                    stopping = True
                    break
                ops.append(op)
            batch = self._claim(ops)
            if batch:
                self.executing = len(batch)
                await self._commit(batch)
                self.executing = 0
                self._settle(batch)

    async def _commit(self, batch: list[_Op]) -> None:
        """Execute and commit the batch, setting each op's `error` when it was not committed."""
        try:
            await self._execute(batch)
        except Exception as exc:
            if self._database_failed(exc):
                # The connection is gone or the database refuses: row by row would fail alike.
                for op in batch:
                    op.error = exc
                return
            # One bad row must not sink the others: retry them one by one.
            log.warning("journal batch of %d failed (%s); retrying row by row", len(batch), exc)
            for op in batch:
                try:
                    await self._execute([op])
                except Exception as single:
                    op.error = single
