"""Retention that keeps the proof: `undoproxy archive` moves closed sessions out of the journal
into a compressed, self-verifying file (or deletes them), and the chain records what left.

What is taken: sessions `committed` or `rolled_back` that nothing has touched since
`idle_before` (neither the session nor a step of it), with no approval still pending: each
with all its steps and approvals. Open sessions, and those a rollback left incomplete, stay.

How the proof is kept, per batch (at most `BATCH_STEPS` steps and `BATCH_SESSIONS`
sessions, so that one transaction stays short while agents keep writing):
1. In one read snapshot: S is the last chain entry of any row of the batch. The chain from
   the current start (the last cut, or the genesis) to S is checked link by link and key by
   key (each entry's HMAC under the journal's chain key, `chain_verify.KeyCheck`), every row
   of the batch against its last entry, and every other row whose last entry is at or before
   S (it survives, and will be chained again) against its own: archiving refuses to cut a
   chain that does not verify, and never chains again a row edited by hand. (Entries keyed
   with another chain key, from before the credentials key was changed, cannot be checked
   with this one: archiving refuses to cut them.) The batch is written to the archive file as
   one gzip member: every chain entry up to S in order, keyed entries with their key_id and
   row_hash, each archived row right after its last entry, and a digest of it all.
2. One transaction (`write_all`): a guard fails it if any row of the batch changed after the
   snapshot (a read journaled into a committed session meanwhile); the surviving rows whose
   last entry is at or before S get a new entry (an UPDATE that changes nothing: their
   content as now, chained by the writer as every change is, keyed); the batch's rows are
   deleted; and an `archives` row, itself chained (keyed), records the batch: its sessions,
   counts, the file and its digest, and the cut: entry S and its hash, after which the chain
   now starts.
3. The entries up to S are deleted (`verify` ignores them from step 2 on).
`verify` then starts the chain at the last cut, checks the `archives` rows like any other,
and still finds any edit, deletion or insertion among what remains. `verify --archive FILE`
checks a file on its own (links, keys, rows, digests) and against the journal's `archives`
rows.

The file: gzip members, one per batch, of JSON lines: a header (`undoproxy_archive`, the
archive id, the cut before and after, its sessions), then `{"entry": [seq, table, row id,
version, prev_hash, hash, key_id, row_hash]}` lines (key_id and row_hash null for an entry
from before keyed chains; format 1, written before keyed chains, has the first six only) with
`{"row": table, "values": {...}}` lines (a blob as `{"b64": ...}`), then `{"end": {...,
"sha256": ...}}`, the SHA-256 of every line before it. It holds what the journal held
(session tokens, request bodies), so it is created mode 0600.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiosqlite

from undoproxy.errors import JournalError, UndoproxyError
from undoproxy.store import chain
from undoproxy.store.chain_verify import KeyCheck, row_matches
from undoproxy.store.chainscan import Cut
from undoproxy.store.journal import Journal
from undoproxy.store.records import new_id

log = logging.getLogger(__name__)
FORMAT = 2  # 2: entries with their key_id and row_hash (keyed chains); 1 before
FORMATS = (1, 2)  # what `archivefile` reads
BATCH_STEPS = 10_000  # steps one archive transaction removes (a larger session goes alone)
BATCH_SESSIONS = 500  # sessions one archive transaction removes
CLOSED = ("committed", "rolled_back")
FILE_MODE = 0o600  # the archive holds what the journal held: tokens, bodies
_OWNER = {"sessions": "id", "steps": "session_id", "approvals": "session_id"}


class ArchiveError(UndoproxyError):
    """An archive run could not go on; nothing of the batch it was on was removed."""


@dataclass
class Result:
    """What an archive run removed (or, with `dry_run`, would remove)."""

    sessions: int = 0
    steps: int = 0
    approvals: int = 0
    entries: int = 0  # chain entries cut
    carried: int = 0  # surviving rows chained again at the head
    archives: list[str] = field(default_factory=list)  # ids of the `archives` rows written
    file: str | None = None
    dry_run: bool = False

    def as_json(self) -> dict[str, Any]:
        """The API's answer."""
        return {
            "sessions": self.sessions,
            "steps": self.steps,
            "approvals": self.approvals,
            "chain_entries": self.entries,
            "carried": self.carried,
            "archives": self.archives,
            "file": self.file,
            "dry_run": self.dry_run,
        }


@dataclass
class Candidate:
    """A session old and closed enough to go, with its number of steps."""

    id: str
    steps: int


async def candidates(journal: Journal, idle_before: float) -> list[Candidate]:
    """Sessions `committed` or `rolled_back`, untouched since `idle_before` (the session and
    its steps), with no approval pending; oldest first."""
    closed = ", ".join(f"'{s}'" for s in CLOSED)
    rows = await journal.query(
        "SELECT s.id, coalesce(c.steps, 0) AS steps FROM sessions s "
        "LEFT JOIN session_counts c ON c.session_id = s.id "
        f"WHERE s.state IN ({closed}) AND s.updated_at < ? AND coalesce(c.last_at, 0) < ? "
        "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.session_id = s.id "
        "AND a.state = 'pending') ORDER BY s.updated_at, s.id",
        (idle_before, idle_before),
    )
    return [Candidate(r["id"], int(r["steps"])) for r in rows]


def batches(found: Sequence[Candidate]) -> list[list[Candidate]]:
    """The candidates in batches of at most BATCH_STEPS steps and BATCH_SESSIONS sessions."""
    out: list[list[Candidate]] = []
    current: list[Candidate] = []
    steps = 0
    for candidate in found:
        if current and (steps + candidate.steps > BATCH_STEPS or len(current) >= BATCH_SESSIONS):
            out.append(current)
            current, steps = [], 0
        current.append(candidate)
        steps += candidate.steps
    if current:
        out.append(current)
    return out


async def archive(
    journal: Journal,
    *,
    idle_before: float,
    to: Path | None,
    dry_run: bool = False,
) -> Result:
    """Archive (to the file `to`, or delete with None) the sessions closed and idle since
    `idle_before`. One run at a time per journal (across replicas on PostgreSQL)."""
    async with _exclusive(journal):
        await journal.writer.flush()
        found = await candidates(journal, idle_before)
        result = Result(dry_run=dry_run, file=str(to) if to is not None else None)
        if dry_run or not found:
            result.sessions = len(found)
            result.steps = sum(c.steps for c in found)
            if found:
                result.approvals = await _approvals_of(journal, [c.id for c in found])
            return result
        sink = _open_file(to) if to is not None else None
        try:
            for batch in batches(found):
                await _one_batch(journal, batch, idle_before, sink, result)
        finally:
            if sink is not None:
                sink.close()
        return result


async def _approvals_of(journal: Journal, ids: list[str]) -> int:
    total = 0
    for start in range(0, len(ids), BATCH_SESSIONS):
        part = ids[start : start + BATCH_SESSIONS]
        marks = ", ".join("?" for _ in part)
        rows = await journal.query(
            f"SELECT count(*) AS n FROM approvals WHERE session_id IN ({marks})", part
        )
        total += int(rows[0]["n"])
    return total


def _open_file(path: Path) -> IO[bytes]:
    """The archive file, created for this run (never an existing one), mode 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        raise ArchiveError(f"{path} exists: archive to a new file") from None
    except OSError as exc:
        raise ArchiveError(f"cannot create the archive {path}: {exc.strerror or exc}") from None
    return os.fdopen(fd, "wb")


# --- one batch ----------------------------------------------------------------------------


class _Member:
    """One batch in the archive file: JSON lines in a gzip member, and their digest."""

    def __init__(self, sink: IO[bytes] | None) -> None:
        self.sink = sink
        self.start = sink.tell() if sink is not None else 0
        self.gz = gzip.GzipFile(fileobj=sink, mode="wb") if sink is not None else None
        self.digest = hashlib.sha256()

    def line(self, value: Any) -> None:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        self.digest.update(data)
        if self.gz is not None:
            self.gz.write(data)

    def end(self, summary: dict[str, Any]) -> str:
        """Write the trailer, make the member durable; its digest."""
        sha = self.digest.hexdigest()
        self.line({"end": {**summary, "sha256": sha}})
        if self.gz is not None and self.sink is not None:
            self.gz.close()
            self.sink.flush()
            os.fsync(self.sink.fileno())
        return sha

    def undo(self) -> None:
        """The batch was not committed: take the member back out of the file."""
        if self.sink is not None:
            if self.gz is not None and not self.gz.closed:
                self.gz.close()
            self.sink.flush()
            self.sink.truncate(self.start)
            self.sink.seek(self.start)
            os.fsync(self.sink.fileno())


async def _one_batch(
    journal: Journal,
    batch: list[Candidate],
    idle_before: float,
    sink: IO[bytes] | None,
    result: Result,
) -> None:
    ids = [c.id for c in batch]
    archive_id = new_id("ar")
    member = _Member(sink)
    async with _snapshot(journal) as snap:
        tail = await snap.value("SELECT coalesce(max(seq), 0) FROM chain")
        cut = await snap.cut()
        base_seq, base_hash = (cut.seq, cut.hash) if cut else (0, chain.GENESIS)
        lasts = await _last_entries(snap, ids, base_seq)
        if not lasts:
            return
        cut_seq = max(lasts)
        member.line(
            {
                "undoproxy_archive": FORMAT,
                "id": archive_id,
                "created_at": time.time(),
                "idle_before": idle_before,
                "cut_before": {"seq": base_seq, "hash": base_hash},
                "cut": {"seq": cut_seq},
                "sessions": ids,
            }
        )
        counts, cut_hash, entries = await _segment(
            snap, member, lasts, (base_seq, base_hash, cut_seq), chain.keyring(journal.box)
        )
        carried = await _survivors(snap, ids, base_seq, cut_seq)
        await _no_gone_rows(snap, base_seq, cut_seq)
    sha = member.end({"entries": entries, "cut": {"seq": cut_seq, "hash": cut_hash}, **counts})
    try:
        await journal.writer.write_all(
            _statements(
                ids,
                archive_id,
                idle_before,
                tail,
                (base_seq, cut_seq, cut_hash),
                entries,
                counts,
                result.file,
                sha,
            )
        )
    except JournalError as exc:
        member.undo()
        if "CHECK" in str(exc) or "archive_guard" in str(exc):
            raise ArchiveError(
                f"a session being archived changed meanwhile ({', '.join(ids[:3])}"
                f"{', ...' if len(ids) > 3 else ''}): nothing of it was removed; run again"
            ) from None
        raise ArchiveError(f"the journal did not take the archive: {exc}") from None
    # The cut entries go now; verify already starts after the cut (the row above).
    await journal.writer.write("DELETE FROM chain WHERE seq <= ?", (cut_seq,))
    for session_id in ids:
        journal.sessions.discard(session_id)
    result.sessions += counts["sessions"]
    result.steps += counts["steps"]
    result.approvals += counts["approvals"]
    result.entries += entries
    result.carried += carried
    result.archives.append(archive_id)
    log.info(
        "archived %d session(s), %d step(s) (%s): chain cut at entry %d",
        counts["sessions"],
        counts["steps"],
        archive_id,
        cut_seq,
    )


def _in(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


async def _last_entries(
    snap: _Snapshot, ids: list[str], base_seq: int
) -> dict[int, tuple[str, str]]:
    """seq -> (table, row id) of the last entry of every row of the batch."""
    lasts: dict[int, tuple[str, str]] = {}
    for table, owner in _OWNER.items():
        async for r in snap.rows(
            f"SELECT t.id AS id, (SELECT max(c.seq) FROM chain c WHERE c.tbl = '{table}' "
            f"AND c.row_id = t.id) AS seq FROM {table} t WHERE t.{owner} IN ({_in(ids)})",
            ids,
        ):
            if r["seq"] is None or int(r["seq"]) <= base_seq:
                raise ArchiveError(
                    f"{table[:-1]} {r['id']} is not in the chain: the journal does not verify "
                    "(run `undoproxy verify`); nothing was archived"
                )
            lasts[int(r["seq"])] = (table, str(r["id"]))
    return lasts


async def _segment(
    snap: _Snapshot,
    member: _Member,
    lasts: dict[int, tuple[str, str]],
    span: tuple[int, str, int],
    keys: Mapping[str, chain.ChainKey],
) -> tuple[dict[str, int], str, int]:
    """Write the chain from the last cut to the new one (`span`: the last cut's seq and hash,
    the new cut's seq), each archived row after its last entry, checking both (each entry's
    key with `keys`); (rows per table, the hash at the cut, entries)."""
    base_seq, base_hash, cut_seq = span
    counts = {"sessions": 0, "steps": 0, "approvals": 0}
    head, entries = base_hash, 0
    walk = KeyCheck(keys)
    async for e in snap.rows(
        "SELECT seq, tbl, row_id, version, prev_hash, hash, key_id, row_hash FROM chain "
        "WHERE seq > ? AND seq <= ? ORDER BY seq",
        (base_seq, cut_seq),
    ):
        seq, digest, prev_hash = int(e["seq"]), str(e["hash"]), str(e["prev_hash"])
        key_id, row_digest = e["key_id"], e["row_hash"]
        if prev_hash != head:
            raise ArchiveError(
                f"chain entry {seq} does not follow the one before it: the journal does not "
                "verify (run `undoproxy verify`); nothing was archived"
            )
        wrong = walk.see(seq, e["tbl"], e["row_id"], prev_hash, digest, key_id, row_digest)
        if wrong:
            raise ArchiveError(
                f"{wrong[0]}: the journal does not verify with this undoproxy's chain key (run "
                "`undoproxy verify`); nothing was archived"
            )
        member.line(
            {
                "entry": [
                    seq,
                    e["tbl"],
                    e["row_id"],
                    e["version"],
                    prev_hash,
                    digest,
                    key_id,
                    row_digest,
                ]
            }
        )
        entries += 1
        head = digest
        owned = lasts.get(seq)
        if owned is None:
            continue
        table, row_id = owned
        row = await snap.row(f"SELECT * FROM {table} WHERE id = ?", (row_id,))
        if row is None or not row_matches(
            table, row.items(), prev_hash, digest, key_id, row_digest
        ):
            raise ArchiveError(
                f"{table[:-1]} {row_id} differs from what undoproxy journaled: the journal does "
                "not verify (run `undoproxy verify`); nothing was archived"
            )
        member.line({"row": table, "values": {k: _encode(v) for k, v in row.items()}})
        counts[table] += 1
    if entries == 0:
        raise ArchiveError("the chain ends before what it was to archive; nothing was archived")
    return counts, head, entries


async def _survivors(snap: _Snapshot, ids: list[str], base_seq: int, cut_seq: int) -> int:
    """Check every row that stays and whose last entry is cut (it is chained again); their
    number."""
    carried = 0
    for table in chain.TABLES:
        owner = _OWNER.get(table)
        staying = f" AND t.{owner} NOT IN ({_in(ids)})" if owner else ""
        async for r in snap.rows(
            "SELECT c.seq AS _seq, c.prev_hash AS _prev, c.hash AS _hash, c.key_id AS _key, "
            f"c.row_hash AS _row_hash, t.* FROM chain c "
            f"JOIN {table} t ON t.id = c.row_id WHERE c.tbl = '{table}' AND c.seq > ? "
            "AND c.seq <= ? AND c.version = (SELECT max(version) FROM chain m "
            f"WHERE m.tbl = '{table}' AND m.row_id = c.row_id){staying}",
            (base_seq, cut_seq, *(ids if owner else ())),
        ):
            values = list(r.items())[5:]
            if not row_matches(
                table, values, str(r["_prev"]), str(r["_hash"]), r["_key"], r["_row_hash"]
            ):
                raise ArchiveError(
                    f"{table[:-1]} {r['id']} differs from what undoproxy journaled: the journal "
                    "does not verify (run `undoproxy verify`); nothing was archived"
                )
            carried += 1
    return carried


async def _no_gone_rows(snap: _Snapshot, base_seq: int, cut_seq: int) -> None:
    """Refuse to cut the entries of a row deleted by hand: the cut would hide the deletion."""
    for table in chain.TABLES:
        gone = await snap.row(
            f"SELECT c.row_id AS id FROM chain c WHERE c.tbl = '{table}' AND c.seq > ? "
            f"AND c.seq <= ? AND NOT EXISTS (SELECT 1 FROM {table} t WHERE t.id = c.row_id)",
            (base_seq, cut_seq),
        )
        if gone is not None:
            raise ArchiveError(
                f"{table[:-1]} {gone['id']} was deleted outside undoproxy: the journal does not "
                "verify (run `undoproxy verify`); nothing was archived"
            )


def _statements(
    ids: list[str],
    archive_id: str,
    idle_before: float,
    tail: int,
    cuts: tuple[int, int, str],
    entries: int,
    counts: Mapping[str, int],
    file: str | None,
    sha: str,
) -> list[tuple[str, Sequence[Any]]]:
    """The batch's transaction (see the module docstring, step 2); `cuts`: the start of the
    chain now, and the new cut's seq and hash."""
    base_seq, cut_seq, cut_hash = cuts
    marks = _in(ids)
    changed = (
        "SELECT 1 FROM chain c WHERE c.seq > ? AND ("
        f"(c.tbl = 'sessions' AND c.row_id IN ({marks})) OR "
        f"(c.tbl = 'steps' AND c.row_id IN (SELECT id FROM steps WHERE session_id IN ({marks})))"
        f" OR (c.tbl = 'approvals' AND c.row_id IN (SELECT id FROM approvals "
        f"WHERE session_id IN ({marks}))))"
    )
    statements: list[tuple[str, Sequence[Any]]] = [
        # Fails the whole unit (CHECK ok = 1) when a row of the batch changed since the read.
        (
            f"INSERT INTO archive_guard (ok) SELECT 0 WHERE EXISTS ({changed})",
            (tail, *ids, *ids, *ids),
        )
    ]
    for table in chain.TABLES:
        owner = _OWNER.get(table)
        staying = f" AND {owner} NOT IN ({marks})" if owner else ""
        statements.append(
            (
                # A change that changes nothing: the row's entry, as it is now, at the head.
                f"UPDATE {table} SET created_at = created_at WHERE id IN (SELECT c.row_id "
                f"FROM chain c WHERE c.tbl = '{table}' AND c.seq > ? AND c.seq <= ? "
                "AND c.version = (SELECT max(version) FROM chain m "
                f"WHERE m.tbl = '{table}' AND m.row_id = c.row_id)){staying}",
                (base_seq, cut_seq, *(ids if owner else ())),
            )
        )
    statements += [
        (
            "INSERT INTO archives (id, created_at, idle_before, sessions, steps, approvals, "
            "session_ids, chain_seq, chain_hash, entries, file, sha256) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                archive_id,
                time.time(),
                idle_before,
                counts["sessions"],
                counts["steps"],
                counts["approvals"],
                json.dumps(ids),
                cut_seq,
                cut_hash,
                entries,
                file,
                sha,
            ),
        ),
        (f"DELETE FROM approvals WHERE session_id IN ({marks})", ids),
        (f"DELETE FROM steps WHERE session_id IN ({marks})", ids),
        (f"DELETE FROM session_counts WHERE session_id IN ({marks})", ids),
        (f"DELETE FROM sessions WHERE id IN ({marks})", ids),
    ]
    return statements


def _encode(value: Any) -> Any:
    return {"b64": base64.b64encode(value).decode()} if isinstance(value, bytes) else value


def decode(value: Any) -> Any:
    """A value as an archive file holds it, back as the journal stored it."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    return value


# --- the read snapshot and the lock ---------------------------------------------------------


class _Snapshot:
    """One read transaction on the journal (its own connection), rows as mappings."""

    async def rows(self, sql: str, params: Iterable[Any] = ()) -> AsyncIterator[Mapping[str, Any]]:
        raise NotImplementedError
        yield {}  # pragma: no cover

    async def row(self, sql: str, params: Iterable[Any] = ()) -> Mapping[str, Any] | None:
        async for r in self.rows(sql, params):
            return r
        return None

    async def value(self, sql: str, params: Iterable[Any] = ()) -> int:
        row = await self.row(sql, params)
        assert row is not None
        return int(next(iter(row.values())))

    async def cut(self) -> Cut | None:
        row = await self.row(
            "SELECT id, chain_seq, chain_hash FROM archives ORDER BY chain_seq DESC LIMIT 1"
        )
        return Cut(str(row["id"]), int(row["chain_seq"]), str(row["chain_hash"])) if row else None


class _SqliteSnapshot(_Snapshot):
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def rows(self, sql: str, params: Iterable[Any] = ()) -> AsyncIterator[Mapping[str, Any]]:
        async with self.conn.execute(sql, tuple(params)) as cur:
            cur.arraysize = 500
            async for r in cur:
                yield dict(r)


class _PgSnapshot(_Snapshot):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def rows(self, sql: str, params: Iterable[Any] = ()) -> AsyncIterator[Mapping[str, Any]]:
        from undoproxy.store.postgres.sql import translate

        statement = translate(sql)
        async for r in self.conn.cursor(
            statement.sql, *statement.args(tuple(params)), prefetch=500
        ):
            yield r


@contextlib.asynccontextmanager
async def _snapshot(journal: Journal) -> AsyncIterator[_Snapshot]:
    if journal.path is not None:
        from undoproxy.store import schema

        conn = await schema.connect(journal.path)
        conn.row_factory = aiosqlite.Row
        try:
            await conn.execute("BEGIN")
            yield _SqliteSnapshot(conn)
        finally:
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
            await conn.close()
        return
    import asyncpg

    url = getattr(journal, "url", None)
    assert isinstance(url, str), "a journal is a SQLite file or a PostgreSQL database"
    pg = await asyncpg.connect(url)
    try:
        async with pg.transaction(isolation="repeatable_read", readonly=True):
            yield _PgSnapshot(pg)
    finally:
        await pg.close()


_LOCKS: dict[int, asyncio.Lock] = {}
ARCHIVE_LOCK = 0x756E646F_0003  # PostgreSQL advisory lock: one archive run across replicas


@contextlib.asynccontextmanager
async def _exclusive(journal: Journal) -> AsyncIterator[None]:
    """One archive run at a time: in this process, and on PostgreSQL across replicas."""
    lock = _LOCKS.setdefault(id(journal), asyncio.Lock())
    if lock.locked():
        raise ArchiveError("an archive run is already going on")
    async with lock:
        url = getattr(journal, "url", None)
        if journal.path is not None or not isinstance(url, str):
            yield
            return
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", ARCHIVE_LOCK):
                raise ArchiveError("another replica is archiving this journal now")
            yield
        finally:
            await conn.close()
