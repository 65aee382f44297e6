"""The one write path to the journal.

Every write goes through the journal's writer: `JournalWriter` here on SQLite, `postgres.writer.
PgWriter` on PostgreSQL. Both are a `Writer`, which holds what callers see: `submit()` queues a
write nobody waits for, `await write()` returns only once the row is committed and fsync'd (a
failure raises JournalError, and the caller must not act on it: a mutation is not forwarded).
Which writes are awaited is the rule at the top of `undoproxy.store`.

Writes are committed in whole batches, one transaction each (group commit): while one batch is
being written and fsync'd, the next one gathers, so many concurrent write-aheads share one
fsync. Order is preserved: a row submitted before another is committed in the same transaction
or an earlier one, so an awaited write also makes durable everything queued before it.

A write that gives up is withdrawn, and the caller's answer always matches the database:
- still queued when its `timeout` runs out (or its caller is cancelled): it is withdrawn, the
  writer skips it, and the caller gets JournalError. It is never committed afterwards.
- already executing (its batch is in the database): it can no longer be taken back, so the
  caller keeps waiting for the real outcome and is told the truth, committed or not. The wait
  is bounded by the database's busy timeout (another process holding the write lock) plus the
  disk.
An op moves from queued to executing, or to withdrawn, under one lock (`Writer._claim`,
`Writer._withdraw_queued`), so it is either withdrawn or executed, never both.

SQLite (`JournalWriter`): the writer is a thread of its own with a plain sqlite3 connection.
Callers on the event loop hand it ops through a thread-safe queue; it takes whatever gathered
while it was busy as the next batch, runs it (consecutive rows of one statement via
executemany) and commits, then wakes the loop once to settle the whole batch. No asyncio task
or executor stands between a write-ahead and its commit: the loop pays one queue put per write
and one callback per batch. Every row a batch inserts into or updates in `steps`, `sessions`
or `approvals` appends its hash-chain entry in the same transaction: the writer's connection
carries the chain's triggers (`chain.install`), so the entry is computed from the row as
committed, whatever the statement (see `chain`).

Batched writes with nobody waiting may linger up to LINGER seconds for company, so that a
mutation's outcome shares the next write-ahead's commit; an awaited write ends the wait at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from undoproxy.errors import JournalError
from undoproxy.store import chain

log = logging.getLogger(__name__)
Params = Sequence[Any] | Mapping[str, Any]
BATCH_MAX = 512
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


class Writer:
    """What every backend's writer shares: submit, awaited writes with their timeout and
    withdrawal, and how a batch's outcome reaches its callers. A backend queues ops
    (`_enqueue`), runs batches of them and settles each one (`_settle`)."""

    def __init__(self, *, timeout: float = 5.0) -> None:
        self._timeout = timeout
        self._lock = threading.Lock()  # queued -> executing | withdrawn, never both
        self.failures = 0  # submitted writes that were lost (logged)
        self.withdrawn = 0  # awaited writes that gave up before they were executed
        self.executing = 0  # ops in the batch the database is working on now

    # --- what callers use ------------------------------------------------------------------

    def start(self) -> None:
        """Start writing (in the running loop)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Commit what is queued, then stop."""
        raise NotImplementedError

    def submit(self, sql: str, params: Params = ()) -> None:
        """Queue a write that nobody waits for (reads, progress); failures are logged, counted."""
        self._enqueue(_Op(sql, params, None))

    async def write(self, sql: str, params: Params = ()) -> Any:
        """Queue a write and wait until it is committed and fsync'd.

        Returns what the backend reports for it: None on SQLite; on PostgreSQL the rows an
        INSERT or UPDATE of a chained table changed (so `[]`: it changed none).
        Raises JournalError when it was not committed: it failed, or it was still queued after
        `timeout` seconds (then it is withdrawn and never committed later). A write already
        executing when the timeout runs out is waited for, and its real outcome reported.
        """
        if not self._running():
            raise JournalError("the journal writer is not running")
        loop = asyncio.get_running_loop()
        op = _Op(sql, params, loop.create_future())
        self._enqueue(op)
        timer = loop.call_later(self._timeout, self._expire, op)
        try:
            return await op.done  # type: ignore[misc]
        except asyncio.CancelledError:
            self._withdraw_queued(op, "its caller was cancelled")
            raise
        finally:
            timer.cancel()

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        await self.write("SELECT 1")

    # --- what a backend provides -----------------------------------------------------------

    def _enqueue(self, op: _Op) -> None:
        raise NotImplementedError

    def _running(self) -> bool:
        raise NotImplementedError

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        """True when `exc` concerns the database, not one statement (no row-by-row retry)."""
        return False

    # --- shared mechanics ------------------------------------------------------------------

    def _claim(self, ops: list[_Op]) -> list[_Op]:
        """The ops still queued, now executing (a withdrawn one is skipped)."""
        with self._lock:
            batch = [op for op in ops if op.state is _State.QUEUED]
            for op in batch:
                op.state = _State.EXECUTING
        return batch

    def _withdraw_queued(self, op: _Op, why: str) -> bool:
        """Withdraw `op` if it is still queued (True when it was)."""
        with self._lock:
            if op.state is not _State.QUEUED:
                return False
            op.state = _State.WITHDRAWN
        self.withdrawn += 1
        log.warning("journal write withdrawn (%s): %s", why, _statement(op.sql))
        return True

    def _expire(self, op: _Op) -> None:
        """The timeout of an awaited write: withdraw it if it is still queued."""
        if self._withdraw_queued(op, f"not taken within {self._timeout:g}s"):
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

    def _settle(self, batch: list[_Op]) -> None:
        """Tell each op's caller its outcome (on the event loop)."""
        for op in batch:
            if op.error is None:
                if op.done is not None and not op.done.done():
                    op.done.set_result(op.result)
            elif op.done is not None:
                if not op.done.done():
                    op.done.set_exception(JournalError(f"journal write failed: {op.error}"))
            else:
                self.failures += 1
                log.error("journal write lost: %s (%s)", op.error, _statement(op.sql))


class JournalWriter(Writer):
    """The SQLite writer: owns the write connection (of a migrated journal) on its own thread;
    start() it in the running loop, close() drains and stops."""

    def __init__(self, conn: sqlite3.Connection, *, timeout: float = 5.0) -> None:
        super().__init__(timeout=timeout)
        # Hashes each transaction's new chain entries before its COMMIT (a stand-in that returns
        # None, bench/nochain.py's baseline, leaves nothing to hash).
        seal: Callable[[], None] | None = chain.install(conn)
        self._seal_chain: Callable[[], None] = seal if seal is not None else _nothing
        self._conn = conn
        self._ops: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Future[None] | None = None

    def start(self) -> None:
        """Start the writer thread; its batches are settled on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._stopped = self._loop.create_future()
        self._thread = threading.Thread(target=self._work, name="journal-writer", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        """Commit what is queued, stop the thread and close the connection."""
        if self._thread is None or self._stopped is None:
            return
        self._ops.put(None)
        await asyncio.shield(self._stopped)
        self._thread.join()
        self._thread = None

    def _enqueue(self, op: _Op) -> None:
        self._ops.put(op)

    def _running(self) -> bool:
        return self._thread is not None and self._stopped is not None and not self._stopped.done()

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        return _database_failed(exc)

    # --- on the writer's thread ------------------------------------------------------------

    def _work(self) -> None:
        try:
            stopping = False
            while not stopping:
                ops, stopping = self._gather()
                batch = self._claim(ops)
                if batch:
                    self.executing = len(batch)
                    self._commit(batch)
                    self.executing = 0
                    self._call_loop(self._settle, batch)
        finally:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._call_loop(_set_done, self._stopped)

    def _gather(self) -> tuple[list[_Op], bool]:
        """The next batch's ops (waiting for the first), and whether to stop after it."""
        first = self._ops.get()
        if first is None:
            return [], True
        ops = [first]
        if first.done is None:  # nobody waits for it: linger for company, unless someone waits
            deadline = time.monotonic() + LINGER
            while len(ops) < BATCH_MAX and (left := deadline - time.monotonic()) > 0:
                try:
                    op = self._ops.get(timeout=left)
                except queue.Empty:
                    break
                if op is None:
                    return ops, True
                ops.append(op)
                if op.done is not None:
                    break
        while len(ops) < BATCH_MAX:
            try:
                op = self._ops.get_nowait()
            except queue.Empty:
                break
            if op is None:
                return ops, True
            ops.append(op)
        return ops, False

    def _commit(self, batch: list[_Op]) -> None:
        """Execute and commit the batch, setting each op's `error` when it was not committed."""
        try:
            self._execute(batch)
        except Exception as exc:
            if self._database_failed(exc):
                # Locked, disk full, I/O error: retrying row by row would only wait out the
                # busy timeout once per row, and fail the same way.
                for op in batch:
                    op.error = exc
                return
            # One bad row must not sink the others: retry them one by one.
            log.warning("journal batch of %d failed (%s); retrying row by row", len(batch), exc)
            for op in batch:
                try:
                    self._execute([op])
                except Exception as single:
                    op.error = single

    def _execute(self, batch: list[_Op]) -> None:
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

    def _call_loop(self, func: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is left to tell
            self._loop.call_soon_threadsafe(func, *args)


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


def _set_done(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def _nothing() -> None:
    """No chain to seal."""
