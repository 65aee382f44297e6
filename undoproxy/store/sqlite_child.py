"""The SQLite journal's writer process: commits the batches `sqlite_writer.JournalWriter` sends.

    python -m undoproxy.store.sqlite_child JOURNAL_PATH BUSY_TIMEOUT_MS

Why a process: Python's sqlite3 releases the GIL inside each statement and takes it back
after, so a writer thread in the proxy's process needs the GIL several times per row (bind,
step, fetch), and each time waits for the event loop to let go of it. Under load that made a
batch take 5-6 ms instead of 0.5 ms, and the proxy's requests waited on it (bench/README.md).
Here the writer has an interpreter of its own.

Protocol, on stdin and stdout, each message a frame (4-byte big-endian length, then a pickle):
- undoproxy first sends `("key", secret)`: the chain key (never on the command line, where
  `ps` would show it);
- the child then says `("ready", pid)`, or `("failed", why)` when it cannot open the journal;
- then, for each batch `[(sql, params, awaited), ...]` it receives, it answers one outcome per
  op: None when it was committed, else why not (text). A batch is one transaction; when it
  fails for one statement's sake the ops are retried one by one, each in its own transaction;
  when it fails for the database's sake (locked, full, I/O) every op fails alike.
A batch that someone waits for (an op `awaited`) is committed with `synchronous=FULL`: the WAL
is fsync'd before the answer. A batch nobody waits for (reads, outcomes: see the rule at the
top of `undoproxy.store`) is committed without the fsync (`NORMAL`); the next awaited commit's
fsync covers it too (the WAL is one file, written in order), and WAL checkpoints stay safe.
End of stdin (undoproxy closed it, or died) ends the child once its batch is committed. It
ignores SIGINT and SIGTERM, and runs in a session of its own: Ctrl-C in a terminal stops
undoproxy, which then commits what it holds through the child before closing it.

Every row a batch inserts into or updates in a chained table (`chain.TABLES`) appends its
keyed hash-chain entry in the same transaction: the connection carries the chain's triggers
(`chain.install`), and the transaction's entries are hashed just before its COMMIT.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sqlite3
import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from undoproxy.store import chain, schema
from undoproxy.store.writer import MANY

HEADER = struct.Struct(">I")
Outcome = str | None


def frame(message: Any) -> bytes:
    """One message, framed."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def read_frame(stream: BinaryIO) -> Any:
    """The next message, or None at the end of the stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


class Batches:
    """Runs batches on one connection (which carries the chain's triggers)."""

    def __init__(self, conn: sqlite3.Connection, append: Callable[[], None] | None) -> None:
        self.conn = conn
        # Appends the transaction's chain entries, just before its COMMIT.
        self.append: Callable[[], None] = append if append is not None else _nothing
        self._synchronous = "FULL"  # as schema.PRAGMAS opened it

    def commit(self, batch: Sequence[tuple[str, Any, bool]]) -> list[Outcome]:
        """Commit `batch`, in one transaction if possible; what became of each op."""
        self._durability("FULL" if any(awaited for _, _, awaited in batch) else "NORMAL")
        ops = [(sql, params) for sql, params, _ in batch]
        try:
            self._transaction(ops)
        except Exception as exc:
            if _database_failed(exc):
                return [_why(exc)] * len(ops)
            outcomes: list[Outcome] = []
            for op in ops:  # one bad row must not sink the others
                try:
                    self._transaction([op])
                except Exception as single:
                    outcomes.append(_why(single))
                else:
                    outcomes.append(None)
            return outcomes
        return [None] * len(ops)

    def _durability(self, mode: str) -> None:
        if mode != self._synchronous:
            self.conn.execute(f"PRAGMA synchronous={mode}")
            self._synchronous = mode

    def _transaction(self, ops: Sequence[tuple[str, Any]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            i = 0
            while i < len(ops):
                if ops[i][0] == MANY:  # several statements, one unit (`write_all`)
                    for sql, params in ops[i][1]:
                        conn.execute(sql, params)
                    i += 1
                    continue
                j = i + 1
                while j < len(ops) and ops[j][0] == ops[i][0]:
                    j += 1
                if j - i == 1:
                    conn.execute(ops[i][0], ops[i][1])
                else:
                    conn.executemany(ops[i][0], [params for _, params in ops[i:j]])
                i = j
            self.append()
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise


def open_batches(path: Path, busy_timeout_ms: int, key: chain.ChainKey) -> Batches:
    """The child's connection to the (migrated) journal, with the chain's triggers on it."""
    conn = schema.connect_sync(path, busy_timeout_ms=busy_timeout_ms)
    try:
        return Batches(conn, chain.install(conn, key))
    except BaseException:
        conn.close()
        raise


def main(argv: Sequence[str]) -> int:
    """Serve batches from stdin until it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    path, busy_timeout_ms = Path(argv[0]), int(argv[1])
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    said = read_frame(inp)
    if not (isinstance(said, tuple) and len(said) == 2 and said[0] == "key"):
        out.write(frame(("failed", "the journal's writer got no chain key")))
        out.flush()
        return 1
    try:
        batches = open_batches(path, busy_timeout_ms, chain.ChainKey(bytes(said[1])))
    except Exception as exc:
        out.write(frame(("failed", f"cannot open the journal {path}: {_why(exc)}")))
        out.flush()
        return 1
    out.write(frame(("ready", os.getpid())))
    out.flush()
    try:
        while (ops := read_frame(inp)) is not None:
            out.write(frame(batches.commit(ops)))
            out.flush()
    finally:
        batches.conn.close()
    return 0


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


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _nothing() -> None:
    """No chain entries to append (bench/nochain.py's baseline)."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
