"""The one write path to the journal.

Every write goes through the journal's writer (`JournalWriter` on SQLite, `postgres.writer.
PgWriter` on PostgreSQL; both are a `QueuedWriter`, which holds everything below but how a
batch is executed): `submit()` queues a write nobody waits for, `await
write()` returns only once the row is committed and fsync'd (a failure raises JournalError, and
the caller must not act on it: a mutation is not forwarded). Which writes are awaited is the
rule at the top of `undoproxy.store`.

A single task drains the queue and commits whole batches in one transaction (group commit):
while one batch is being written and fsync'd, the next one gathers, so many concurrent
write-aheads share one fsync. The batch runs in one call on the writer's own thread with a
plain sqlite3 connection (consecutive rows of one statement via executemany): one thread hop
per batch keeps the write-ahead wait short. Order is preserved: a row submitted before another
is committed in the same transaction or an earlier one, so an awaited write also makes durable
everything queued before it.

A write that gives up is withdrawn, and the caller's answer always matches the database:
- still queued when its `timeout` runs out (or its caller is cancelled): it is withdrawn, the
  writer skips it, and the caller gets JournalError. It is never committed afterwards.
- already executing (its batch is in SQLite): it can no longer be taken back, so the caller
  keeps waiting for the real outcome and is told the truth, committed or not. The wait is
  bounded by SQLite's busy timeout (another process holding the write lock) plus the disk.
Both decisions are taken on the event loop, where the writer also moves ops from the queue
into a batch, so an op is either withdrawn or executed, never both.

Every row a batch inserts into or updates in `steps`, `sessions` or `approvals` appends its
hash-chain entry in the same transaction: the writer's connection carries the chain's
triggers (`chain.install`), so the entry is computed from the row as committed, whatever the
statement (see `chain`).

Batched writes with nobody waiting may linger up to LINGER seconds for company, so that a
mutation's outcome shares the next write-ahead's commit; an awaited write ends the wait at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from undoproxy.errors import JournalError
from undoproxy.store import chain

log = logging.getLogger(__name__)
Params = Sequence[Any] | Mapping[str, Any]
BATCH_MAX = 512
# How long batched writes may wait for company when nothing awaits them: a mutation's outcome
# then shares the next write-ahead's commit (one fsync and one thread hop instead of two).
LINGER = 0.02


class _State(enum.Enum):
    QUEUED = "queued"
    EXECUTING = "executing"
    WITHDRAWN = "withdrawn"


@dataclass
class _Op:
    sql: str
    params: Params
    done: asyncio.Future[Any] | None
    state: _State = field(default=_State.QUEUED)
    result: Any = None  # what the backend returned for it (PostgreSQL: the rows it changed)


class QueuedWriter:
    """The queue, batching, withdrawal and timeouts every backend's writer shares; a backend
    says how a batch is executed (`_execute`, in one transaction) and closed (`_close`)."""

    def __init__(self, *, timeout: float = 5.0) -> None:
        self._queue: asyncio.Queue[_Op | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()  # someone waits for a commit: stop lingering
        self._timeout = timeout
        self.failures = 0  # submitted writes that were lost (logged)
        self.withdrawn = 0  # awaited writes that gave up before they were executed
        self.executing = 0  # ops in the batch SQLite is working on now

    def start(self) -> None:
        """Start the writer task."""
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
        done: asyncio.Future[None] = loop.create_future()
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

    async def _close(self) -> None:
        """Close the backend's connection (the queue is drained)."""
        raise NotImplementedError

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
        log.warning("journal write withdrawn (%s): %s", why, _statement(op.sql))

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

    async def _commit(self, batch: list[_Op]) -> None:
        try:
            await self._execute(batch)
        except Exception as exc:
            if self._database_failed(exc):
                # Locked, disk full, I/O error: retrying row by row would only wait out the
                # busy timeout once per row, and fail the same way.
                for op in batch:
                    self._fail(op, exc)
                return
            # One bad row must not sink the others: retry them one by one.
            log.warning("journal batch of %d failed (%s); retrying row by row", len(batch), exc)
            for op in batch:
                try:
                    await self._execute([op])
                except Exception as single:
                    self._fail(op, single)
                else:
                    self._succeed(op)
        else:
            for op in batch:
                self._succeed(op)

    async def _execute(self, batch: list[_Op]) -> None:
        """Execute a batch in one transaction, setting each op's `result`; raise on failure
        (nothing of the batch is then committed)."""
        raise NotImplementedError

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        """True when `exc` concerns the database, not one statement (no row-by-row retry)."""
        return False

    @staticmethod
    def _succeed(op: _Op) -> None:
        if op.done is not None and not op.done.done():
            op.done.set_result(op.result)

    def _fail(self, op: _Op, exc: Exception) -> None:
        if op.done is not None and not op.done.done():
            op.done.set_exception(JournalError(f"journal write failed: {exc}"))
        else:
            self.failures += 1
            log.error("journal write lost: %s (%s)", exc, _statement(op.sql))


class JournalWriter(QueuedWriter):
    """The SQLite writer: owns the write connection (of a migrated journal); start() it in the
    running loop, close() drains and stops."""

    def __init__(self, conn: sqlite3.Connection, *, timeout: float = 5.0) -> None:
        # Hashes each transaction's new chain entries before its COMMIT (a stand-in that returns
        # None, bench/nochain.py's baseline, leaves nothing to hash).
        seal: Callable[[], None] | None = chain.install(conn)
        self._seal_chain: Callable[[], None] = seal if seal is not None else _nothing
        self._conn = conn
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-writer")
        super().__init__(timeout=timeout)

    async def _close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._conn.close)
        self._thread.shutdown(wait=True)

    async def _execute(self, batch: list[_Op]) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._execute_sync, batch)

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        return _database_failed(exc)

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
            self._seal_chain()
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise


# SQLite's primary result codes that concern the database file, not one statement.
_DATABASE_ERRORS = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_NOTADB,
    }
)


def _database_failed(exc: Exception) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in _DATABASE_ERRORS


def _statement(sql: str) -> str:
    """The start of a statement, for logs (never its parameters)."""
    return sql.split("(")[0].strip()[:60]


def _nothing() -> None:
    """No chain to seal."""
