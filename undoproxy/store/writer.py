"""The one write path to the journal.

Every write goes through `JournalWriter`: hooks either `submit()` (fire and forget: reads,
updates after a response) or `await write()` (write-ahead: the call returns only once the row
is committed; a failure raises JournalError, and the caller must not forward the request).
A single task drains the queue and commits whole batches in one transaction, so many
concurrent write-aheads cost one commit. The batch runs in one call on the writer's own
thread with a plain sqlite3 connection (consecutive rows of one statement via executemany):
one thread hop per batch instead of one per statement keeps the write-ahead wait short.
Order is preserved: a session row submitted before a step row is committed before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from undoproxy.errors import JournalError

log = logging.getLogger(__name__)
Params = Sequence[Any] | Mapping[str, Any]
BATCH_MAX = 512


@dataclass
class _Op:
    sql: str
    params: Params
    done: asyncio.Future[None] | None


class JournalWriter:
    """Owns the write connection; start() it in the running loop, close() drains and stops."""

    def __init__(self, conn: sqlite3.Connection, *, timeout: float = 5.0) -> None:
        self._conn = conn
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-writer")
        self._queue: asyncio.Queue[_Op | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._timeout = timeout
        self.failures = 0

    def start(self) -> None:
        """Start the writer task."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journal-writer")

    def submit(self, sql: str, params: Params = ()) -> None:
        """Queue a write that nobody waits for; failures are logged and counted."""
        self._queue.put_nowait(_Op(sql, params, None))

    async def write(self, sql: str, params: Params = ()) -> None:
        """Queue a write and wait until it is committed; raises JournalError if it is not."""
        if self._task is None or self._task.done():
            raise JournalError("the journal writer is not running")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Op(sql, params, fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), self._timeout)
        except TimeoutError:
            raise JournalError(
                f"the journal did not confirm the write within {self._timeout:g}s"
            ) from None

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        await self.write("SELECT 1")

    async def close(self) -> None:
        """Commit what is queued, then stop."""
        if self._task is None:
            return
        self._queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await asyncio.get_running_loop().run_in_executor(self._thread, self._conn.close)
        self._thread.shutdown(wait=True)

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            batch: list[_Op] = []
            if first is None:
                stopping = True
            else:
                batch.append(first)
            while len(batch) < BATCH_MAX and not self._queue.empty():
                op = self._queue.get_nowait()
                if op is None:
                    stopping = True
                    break
                batch.append(op)
            if batch:
                await self._commit(batch)

    async def _commit(self, batch: list[_Op]) -> None:
        try:
            await self._execute(batch)
        except Exception as exc:  # one bad row must not sink the others: retry one by one
            log.warning("journal batch of %d failed (%s); retrying row by row", len(batch), exc)
            for op in batch:
                try:
                    await self._execute([op])
                except Exception as single:
                    self._fail(op, single)
                else:
                    self._succeed(op)
            return
        for op in batch:
            self._succeed(op)

    async def _execute(self, batch: list[_Op]) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._execute_sync, batch)

    def _execute_sync(self, batch: list[_Op]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            i = 0
            while i < len(batch):
                j = i + 1
                while j < len(batch) and batch[j].sql == batch[i].sql:
                    j += 1
                if j - i == 1:
                    conn.execute(batch[i].sql, batch[i].params)
                else:
                    conn.executemany(batch[i].sql, [op.params for op in batch[i:j]])
                i = j
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _succeed(op: _Op) -> None:
        if op.done is not None and not op.done.done():
            op.done.set_result(None)

    def _fail(self, op: _Op, exc: Exception) -> None:
        self.failures += 1
        if op.done is not None and not op.done.done():
            op.done.set_exception(JournalError(f"journal write failed: {exc}"))
        else:
            log.error("journal write lost: %s (%s)", exc, op.sql.split("(")[0].strip())
