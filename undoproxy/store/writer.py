"""The one write path to the journal.

Every write goes through the journal's writer: `sqlite_writer.JournalWriter` on SQLite,
`postgres.writer.PgWriter` on PostgreSQL. Both are a `QueuedWriter`, which holds what callers
see: `submit()` queues a write nobody waits for, `await write()` returns only once the row is
committed and fsync'd (a failure raises JournalError, and the caller must not act on it: a
mutation is not forwarded). Which writes are awaited is the rule at the top of
`undoproxy.store`; a backend says only how a batch is committed (`_commit`).

A single task drains the queue and commits whole batches in one transaction (group commit):
while one batch is being written and fsync'd, the next one gathers, so many concurrent
write-aheads share one fsync. Order is preserved: a row submitted before another is committed
in the same transaction or an earlier one, so an awaited write also makes durable everything
queued before it.

A write that gives up is withdrawn, and the caller's answer always matches the database:
- still queued when its `timeout` runs out (or its caller is cancelled): it is withdrawn, the
  writer skips it, and the caller gets JournalError. It is never committed afterwards.
- already executing (its batch is in the database): it can no longer be taken back, so the
  caller keeps waiting for the real outcome and is told the truth, committed or not. The wait
  is bounded by the database's busy timeout (another process holding the write lock) plus the
  disk.
Both decisions are taken on the event loop, where the writer also moves ops from the queue
into a batch, so an op is either withdrawn or executed, never both.

Batched writes with nobody waiting may linger up to `linger` seconds for company, so that a
mutation's outcome shares the next write-ahead's commit; an awaited write ends the wait at once.
(The SQLite writer does not linger: its commits are made by another process, and a write-ahead
that found the outcome of the request before it in its batch waited for it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from undoproxy.errors import JournalError

log = logging.getLogger(__name__)
Params = Sequence[Any] | Mapping[str, Any]
BATCH_MAX = 512
# The `sql` of an op made of several statements (`write_all`), its params the statements.
MANY = "-- many statements, one unit"
# How long batched writes may wait for company when nothing awaits them: a mutation's outcome
# then shares the next write-ahead's commit (one fsync instead of two).
LINGER = 0.02


class _State(enum.Enum):
    QUEUED = "queued"
    EXECUTING = "executing"
    WITHDRAWN = "withdrawn"


@dataclass(eq=False)
class _Op:
    sql: str
    params: Params
    done: asyncio.Future[Any] | None
    state: _State = field(default=_State.QUEUED)
    result: Any = None  # what the backend returned for it (PostgreSQL: the rows it changed)
    error: BaseException | None = None  # why it was not committed


class QueuedWriter:
    """The queue, group commit, withdrawal and timeouts every backend's writer shares; a
    backend commits a batch (`_commit`, or `_execute` for one transaction) and closes."""

    linger = LINGER  # a backend whose commits cost the event loop nothing may say 0

    def __init__(self, *, timeout: float = 5.0) -> None:
        self._queue: asyncio.Queue[_Op | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()  # someone waits for a commit: stop lingering
        self._timeout = timeout
        self.failures = 0  # submitted writes that were lost (logged)
        self.withdrawn = 0  # awaited writes that gave up before they were executed
        self.executing = 0  # ops in the batch the database is working on now

    def start(self) -> None:
        """Start the writer task (in the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journal-writer")

    def submit(self, sql: str, params: Params = ()) -> None:
        """Queue a write that nobody waits for (reads, progress); failures are logged, counted."""
        self._queue.put_nowait(_Op(sql, params, None))

    async def write(self, sql: str, params: Params = ()) -> Any:
        """Queue a write and wait until it is committed and fsync'd.

        Returns what the backend reports for it: None on SQLite; on PostgreSQL the rows an
        INSERT or UPDATE of a chained table changed (so `[]`: it changed none).
        Raises JournalError when it was not committed: it failed, or it was still queued after
        `timeout` seconds (then it is withdrawn and never committed later). A write already
        executing when the timeout runs out is waited for, and its real outcome reported.
        """
        if self._task is None or self._task.done():
            raise JournalError("the journal writer is not running")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        op = _Op(sql, params, done)
        self._queue.put_nowait(op)
        self._urgent.set()
        timer = loop.call_later(self._timeout, self._expire, op)
        try:
            return await done
        except asyncio.CancelledError:
            if op.state is _State.QUEUED:
                self._withdraw(op, "its caller was cancelled")
            raise
        finally:
            timer.cancel()

    async def write_all(self, statements: Sequence[tuple[str, Params]]) -> Any:
        """Queue several statements as one unit, committed all together or not at all (never
        split by a retry row by row), and wait for the commit like `write`."""
        return await self.write(MANY, [(sql, params) for sql, params in statements])

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        await self.write("SELECT 1")

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

    # --- what a backend provides -----------------------------------------------------------

    async def _close(self) -> None:
        """Close the backend's connection (the queue is drained)."""
        raise NotImplementedError

    async def _execute(self, batch: list[_Op]) -> None:
        """Execute a batch in one transaction, setting each op's `result`; raise on failure
        (nothing of the batch is then committed). Used by the default `_commit`."""
        raise NotImplementedError

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        """True when `exc` concerns the database, not one statement (no row-by-row retry)."""
        return False

    async def _commit(self, batch: list[_Op]) -> None:
        """Commit the batch, setting each op's `error` when it was not committed: in one
        transaction; when that fails for one statement's sake, row by row."""
        try:
            await self._execute(batch)
        except Exception as exc:
            if self._database_failed(exc):
                # Locked, disk full, connection lost: row by row would only fail alike.
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

    # --- the mechanics ---------------------------------------------------------------------

    def _expire(self, op: _Op) -> None:
        """The timeout of an awaited write: withdraw it if it is still queued."""
        if op.state is _State.QUEUED:
            self._withdraw(op, f"not taken within {self._timeout:g}s")
            assert op.done is not None
            if not op.done.done():
                op.done.set_exception(
                    JournalError(
                        f"the journal did not take the write within {self._timeout:g}s; "
                        "it was withdrawn and will not be committed"
                    )
                )
        elif op.state is _State.EXECUTING:
            log.warning("journal write past its %gs timeout; waiting for the commit", self._timeout)

    def _withdraw(self, op: _Op, why: str) -> None:
        op.state = _State.WITHDRAWN
        self.withdrawn += 1
        log.warning("journal write withdrawn (%s): %s", why, statement(op.sql))

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if (
                self.linger
                and first is not None
                and first.done is None
                and not self._urgent.is_set()
                and self._queue.qsize() < BATCH_MAX
            ):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self.linger)
            self._urgent.clear()  # before draining: a write queued after the drain sets it again
            batch: list[_Op] = []
            if first is None:
                stopping = True
            elif first.state is _State.QUEUED:
                batch.append(first)
            while len(batch) < BATCH_MAX and not self._queue.empty():
                op = self._queue.get_nowait()
                if op is None:
                    stopping = True
                    break
                if op.state is _State.QUEUED:
                    batch.append(op)
            if batch:
                for op in batch:  # from here on the op cannot be withdrawn (see the docstring)
                    op.state = _State.EXECUTING
                self.executing = len(batch)
                await self._commit(batch)
                self.executing = 0
                self._settle(batch)

    def _settle(self, batch: list[_Op]) -> None:
        """Tell each op's caller its outcome."""
        for op in batch:
            if op.error is None:
                if op.done is not None and not op.done.done():
                    op.done.set_result(op.result)
            elif op.done is not None:
                if not op.done.done():
                    op.done.set_exception(JournalError(f"journal write failed: {reason(op.error)}"))
            else:
                self.failures += 1
                log.error("journal write lost: %s (%s)", reason(op.error), statement(op.sql))


def reason(exc: BaseException) -> str:
    """What went wrong, never empty (a TimeoutError's text is)."""
    return str(exc) or type(exc).__name__


def statement(sql: str) -> str:
    """The start of a statement, for logs (never its parameters)."""
    return sql.split("(")[0].strip()[:60]
