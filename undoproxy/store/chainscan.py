"""`undoproxy verify` in constant memory: the keyed chain (`chain`) checked against the
journal's rows as four streaming passes over the database, whatever the journal's size.

A check that kept every row's last entry in memory took 719 MB at a million steps. Here the
database does the joins and each pass reads rows in order, keeping only the row it is on:
1. links and keys: the entries in `seq` order, each `prev_hash` against the hash before it
   (an entry deleted, inserted or moved breaks the link there), and each entry's key
   (`chain_verify.KeyCheck`: its HMAC under the chain key its key_id names, no unkeyed entry
   once keyed ones began, the keying entry undoproxy's);
2. versions: the entries in (table, row, version) order, the chain's unique index: each row's
   versions follow each other, and in the chain's order;
3. content: every row of each table with its last entry (an index lookup per row), its
   canonical form against that entry's row_hash (`chain_verify.row_matches`; the SHA-256 hash
   of an entry from before keyed chains); a row without an entry was added outside
   undoproxy;
4. presence: every row the chain names that the table no longer has.
Then a chain with entries and no keyed one, in a journal that records the migration that
keyed it, lost its keys (they were rewritten without the key). What is kept is bounded: the
first `PROBLEMS_KEPT` problems by position (the rest counted), as many link breaks, to place
a missing version at the break it caused, and the ids of the keys verify was given.

Keys: verify is given the chain keys (`chain.keyring` of the credentials key, and of older
ones: `--key-file`); entries under a key it was not given cannot be checked, and fail.

Retention (`archiving`) cuts the chain's oldest entries together with the rows it archives:
the chain then starts after the last archive's cut, at its `chain_hash` (the `archives` row
that says so is chained and keyed itself, so the cut cannot be moved without the key), and a
row's first entry after a cut may be any version. Entries after a cut may be unkeyed until
the keying entry (entries from before keyed chains that survived the cut), as at the start.

Incremental (`since`: a head an earlier verify printed): only what came after that entry is
checked: the links and keys from it on (every entry keyed when that head was), and the
versions, content and presence of every row with an entry after it. A row changed outside
undoproxy without a new entry (an edit by hand of a row journaled before that head), or
added by hand, is found by a full verify only.

`Scan` holds the passes' logic; `verify_sqlite` feeds it from a SQLite journal file, and
`postgres.verify` from a PostgreSQL journal.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from undoproxy.store.chain import GENESIS, KEYED_MIGRATION, TABLES, ChainKey
from undoproxy.store.chain_verify import NOUN, KeyCheck, NoChain, Problem, Report, row_matches

__all__ = [
    "Cut",
    "Head",
    "NoChain",
    "Problem",
    "Progress",
    "Report",
    "Scan",
    "Ticker",
    "verify_sqlite",
]

PROBLEMS_KEPT = 1000  # problems a report names (by position); more are counted
Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass(frozen=True)
class Cut:
    """Where the chain starts after retention: just after entry `seq`, whose hash it was."""

    archive: str
    seq: int
    hash: str


@dataclass(frozen=True)
class Head:
    """The entry an incremental verify starts after: its seq, its hash, its key (None: an
    unkeyed entry, so keyed ones may still begin after it)."""

    seq: int
    hash: str
    key_id: str | None


class Scan:
    """The four passes' logic, fed row by row (see the module docstring)."""

    def __init__(
        self,
        keys: Mapping[str, ChainKey],
        *,
        cut: Cut | None = None,
        since: Head | None = None,
        keyed_by_migration: bool = False,
    ) -> None:
        self.keyed = KeyCheck(keys)
        self.cut = cut
        self.since = since
        self.keyed_by_migration = keyed_by_migration
        self._kept: list[tuple[tuple[int, int], int, Problem]] = []  # a max-heap (negated)
        self._order = itertools.count()
        self.more = 0
        self._breaks: list[int] = []  # seqs of broken links (at most PROBLEMS_KEPT)
        self.entries = 0
        if since is not None:
            self.head, self._before = since.hash, f"entry {since.seq} (the head verified from)"
            self.keyed.start_after(since.key_id, since.seq)
        elif cut is not None:
            self.head, self._before = cut.hash, f"archive {cut.archive}'s cut (entry {cut.seq})"
        else:
            self.head, self._before = GENESIS, "the start"
        self.counts = dict.fromkeys(TABLES, 0)
        self._group: tuple[str, str] | None = None
        self._last_version = 0
        self._last_seq = 0

    def problem(self, problem: Problem) -> None:
        """Keep a problem (the first PROBLEMS_KEPT by position; the others are counted)."""
        key = (-problem.position[0], -problem.position[1])
        item = (key, -next(self._order), problem)
        if len(self._kept) < PROBLEMS_KEPT:
            heapq.heappush(self._kept, item)
            return
        self.more += 1
        if item > self._kept[0]:  # nearer the start than the furthest kept
            heapq.heapreplace(self._kept, item)

    # --- 1. links and keys ---------------------------------------------------------------

    def entry(
        self,
        seq: int,
        table: str,
        row_id: str,
        prev_hash: str,
        digest: str,
        key_id: str | None = None,
        row_digest: str | None = None,
    ) -> None:
        """The next entry in chain order (key_id and row_digest None: an unkeyed one)."""
        self.entries += 1
        for what in self.keyed.see(seq, table, row_id, prev_hash, digest, key_id, row_digest):
            self.problem(Problem((seq, 0), table, row_id, what))
        if prev_hash != self.head:
            if len(self._breaks) < PROBLEMS_KEPT:
                self._breaks.append(seq)
            self.problem(
                Problem(
                    (seq, 0),
                    table,
                    row_id,
                    f"chain entry {seq} does not follow {self._before} "
                    "(an entry was deleted, inserted, moved or edited)",
                )
            )
        self.head = digest
        self._before = f"entry {seq} ({NOUN.get(table, table)} {row_id})"

    # --- 2. versions ---------------------------------------------------------------------

    def version(self, table: str, row_id: str, version: int, seq: int) -> None:
        """The next entry in (table, row, version) order."""
        if (table, row_id) != self._group:
            self._group = (table, row_id)
            if version > 1 and self.cut is None:
                self._gap(table, row_id, 1, 0, seq)
        elif seq < self._last_seq:
            self.problem(
                Problem(
                    (self._last_seq, 0),
                    table,
                    row_id,
                    f"chain entry {self._last_seq} is version {self._last_version}, after "
                    f"version {version} (entries were moved)",
                )
            )
        elif version > self._last_version + 1:
            self._gap(table, row_id, self._last_version + 1, self._last_seq, seq)
        self._last_version, self._last_seq = version, seq

    def _gap(self, table: str, row_id: str, missing: int, after: int, seq: int) -> None:
        # The missing entry sat where the first broken link after the row's previous entry is.
        at = next((b for b in self._breaks if after < b <= seq), seq)
        what = f"version {missing} is missing from the chain (a chain entry was deleted)"
        self.problem(Problem((at, -1), table, row_id, what))

    # --- 3. content ----------------------------------------------------------------------

    def row(
        self,
        table: str,
        position: int,
        row: Iterable[tuple[str, Any]],
        last: tuple[int, str, str, str | None, str | None] | None,
    ) -> None:
        """A row of `table` (its columns as stored) with its last entry (seq, prev_hash,
        hash, key_id, row_hash)."""
        self.counts[table] += 1
        values = list(row)
        named = dict(values)
        where = f"session {named['session_id']}, #{named['seq']}" if table == "steps" else ""
        if last is None:
            what = "not in the chain: added to the database outside undoproxy"
            self.problem(Problem((2**62, position), table, named["id"], what, where))
            return
        seq, prev_hash, digest, key_id, row_digest = last
        if not row_matches(table, values, prev_hash, digest, key_id, row_digest):
            self.problem(
                Problem(
                    (seq, 1),
                    table,
                    named["id"],
                    f"its content differs from what undoproxy journaled (chain entry {seq}): "
                    "the row was edited outside undoproxy",
                    where,
                )
            )

    # --- 4. presence ---------------------------------------------------------------------

    def gone(self, table: str, row_id: str, seq: int) -> None:
        """A row the chain names (its last entry `seq`) that its table does not have."""
        what = f"deleted: the chain has it (entry {seq}), the journal does not"
        self.problem(Problem((seq, 2), table, row_id, what))

    # --- the report ----------------------------------------------------------------------

    def problems(self) -> list[Problem]:
        """The problems kept, in order of position."""
        return [p for _, _, p in sorted(self._kept, reverse=True)]

    def report(self, wheres: Callable[[list[str]], dict[str, str]]) -> Report:
        """The report; `wheres` names where steps still in the journal are (id -> text)."""
        lost = self.keyed.keys_lost(
            self.entries, self.head, keyed_by_migration=self.keyed_by_migration
        )
        if lost is not None:
            self.problem(lost)
        found = self.problems()
        unplaced = [p.row_id for p in found if p.table == "steps" and not p.where]
        where = wheres(unplaced) if unplaced else {}
        found = [dataclasses.replace(p, where=p.where or where.get(p.row_id, "")) for p in found]
        return Report(
            steps=self.counts["steps"],
            sessions=self.counts["sessions"],
            approvals=self.counts["approvals"],
            entries=self.entries,
            head=self.head,
            problems=found,
            more=self.more,
            keyed_from=self.keyed.keyed_from,
            unkeyed=self.keyed.unkeyed,
            key_ids=tuple(self.keyed.key_ids),
            archive=self.cut.archive if self.cut else None,
            since=self.since.hash if self.since else None,
        )


def head_problem(head: str, cut: Cut | None) -> Problem:
    """A head recorded earlier that the chain no longer has."""
    what = "this head, recorded earlier, is no longer in the chain: it was rewritten or cut"
    if cut is not None:
        what += (
            f" (archive {cut.archive} cut the entries up to {cut.seq}: if it was one of them, "
            "check it with --archive and that archive's file)"
        )
    return Problem((0, 0), "chain", head, what)


class Ticker:
    """Calls `progress` at most every `every` seconds while a pass runs."""

    def __init__(self, progress: Progress | None, every: float = 2.0) -> None:
        self.progress = progress
        self.every = every
        self._next = time.monotonic() + every

    def tick(self, what: str, done: int, total: int) -> None:
        """Say how far `what` is, if it is time to."""
        if self.progress is None or done % 1024:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            self.progress(what, done, total)


# --- SQLite ------------------------------------------------------------------------------


def verify_sqlite(
    path: Path,
    *,
    heads: Iterable[str] = (),
    since: str | None = None,
    progress: Progress | None = None,
    archived_heads: Iterable[str] = (),
    keys: Mapping[str, ChainKey] | None = None,
) -> Report:
    """Check the chain of the SQLite journal at `path`, read-only, in one read transaction
    (undoproxy may be running), in constant memory.

    `keys`: the chain keys by id (`chain.keyring`); a keyed entry under a key not given
    cannot be checked, and is a problem. `heads`: hashes an earlier verify printed, which the
    chain must still contain (or an archive checked with them, `archived_heads`). `since`:
    check only what came after that head. Raises sqlite3.Error when the file cannot be read
    as a journal, NoChain without a chain, ValueError when `since` is not in the chain.
    """
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None)
    # A text column edited into invalid UTF-8 must be reported, not crash the check.
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("BEGIN")  # one snapshot: the rows and the chain as of one commit
        if not _has(conn, "chain"):
            if _migrated(conn, "004_chain"):
                raise NoChain(f"{path} had a hash chain, and its chain table was dropped")
            raise NoChain(f"{path} has no hash chain yet: start undoproxy once to add it")
        cut = sqlite_cut(conn)
        keyed = _keyed_columns(conn)
        start = None
        if since is not None:
            found = conn.execute(
                f"SELECT seq, {_keyed_select(keyed)} FROM chain WHERE hash=?", (since,)
            ).fetchone()
            if found is None:
                raise ValueError(f"the head {since} is not in the chain: verify it all")
            start = Head(int(found[0]), since, found[1])
        scan = Scan(
            keys or {},
            cut=cut,
            since=start,
            keyed_by_migration=_migrated(conn, KEYED_MIGRATION),
        )
        _scan_sqlite(conn, scan, Ticker(progress), keyed)
        archived = set(archived_heads)
        missing = [
            head_problem(head, cut)
            for head in heads
            if head not in archived
            and not conn.execute("SELECT 1 FROM chain WHERE hash=?", (head,)).fetchone()
            and not (cut is not None and head == cut.hash)
        ]
        report = scan.report(lambda ids: _sqlite_wheres(conn, ids))
        return dataclasses.replace(report, problems=missing + report.problems)
    finally:
        conn.close()


def _has(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone() is not None


def _migrated(conn: sqlite3.Connection, name: str) -> bool:
    if not _has(conn, "migrations"):
        return False
    return bool(conn.execute("SELECT 1 FROM migrations WHERE name=?", (name,)).fetchone())


def _keyed_columns(conn: sqlite3.Connection) -> bool:
    """Whether the chain has its key_id and row_hash columns (not in a journal from before
    keyed chains that no undoproxy opened since: its entries are then all unkeyed)."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(chain)")}
    return {"key_id", "row_hash"} <= columns


def _keyed_select(keyed: bool, alias: str = "") -> str:
    """An entry's key_id and row_hash, as selected (NULLs without the columns)."""
    return f"{alias}key_id, {alias}row_hash" if keyed else "NULL, NULL"


def sqlite_cut(conn: sqlite3.Connection) -> Cut | None:
    """The last archive's cut, if the journal was ever archived."""
    if not _has(conn, "archives"):
        return None
    row = conn.execute(
        "SELECT id, chain_seq, chain_hash FROM archives ORDER BY chain_seq DESC LIMIT 1"
    ).fetchone()
    return Cut(str(row[0]), int(row[1]), str(row[2])) if row else None


def bounds(cut: Cut | None, since: Head | None) -> tuple[int, int, bool]:
    """The chain seq the chain starts after (the cut's), the one the scan starts after (or
    the head verified from), and whether it checks only rows changed after it."""
    floor = cut.seq if cut else 0
    return floor, max(floor, since.seq if since else 0), since is not None


def _scan_sqlite(conn: sqlite3.Connection, scan: Scan, ticker: Ticker, keyed: bool) -> None:
    # Entries up to a cut are ignored: an archive deletes them right after its commit.
    floor, low, incremental = bounds(scan.cut, scan.since)
    total = conn.execute("SELECT count(*) FROM chain WHERE seq > ?", (low,)).fetchone()[0]
    cur = conn.execute(
        f"SELECT seq, tbl, row_id, prev_hash, hash, {_keyed_select(keyed)} FROM chain "
        "WHERE seq > ? ORDER BY seq",
        (low,),
    )
    for n, entry in enumerate(cur, 1):
        scan.entry(*entry)
        ticker.tick("chain links", n, total)
    rows_later = (
        " AND (tbl, row_id) IN (SELECT tbl, row_id FROM chain WHERE seq > ?)" if incremental else ""
    )
    cur = conn.execute(
        f"SELECT tbl, row_id, version, seq FROM chain WHERE seq > ?{rows_later} "
        "ORDER BY tbl, row_id, version",
        (floor, low) if incremental else (floor,),
    )
    for n, (table, row_id, version, seq) in enumerate(cur, 1):
        scan.version(table, row_id, version, seq)
        ticker.tick("chain versions", n, total)
    tables = [t for t in TABLES if _has(conn, t)]
    for table in tables:
        last = (
            f"c.version = (SELECT max(version) FROM chain m WHERE m.tbl = '{table}' "
            "AND m.row_id = t.id) AND c.seq > ?"
        )
        head = f"SELECT t.rowid, c.seq, c.prev_hash, c.hash, {_keyed_select(keyed, 'c.')}, t.*"
        if incremental:
            rows = (
                f"{head} FROM chain c JOIN {table} t ON t.id = c.row_id "
                f"WHERE c.tbl = '{table}' AND {last} ORDER BY c.seq"
            )
        else:
            rows = (
                f"{head} FROM {table} t LEFT JOIN chain c ON c.tbl = '{table}' "
                f"AND c.row_id = t.id AND {last} ORDER BY t.rowid"
            )
        count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        cur = conn.execute(rows, (low,))
        names = [d[0] for d in cur.description][6:]
        for n, (position, seq, prev_hash, digest, key, row_digest, *values) in enumerate(cur, 1):
            entry = None if seq is None else (seq, prev_hash, digest, key, row_digest)
            scan.row(table, position, zip(names, values, strict=True), entry)
            ticker.tick(f"{table} rows", n, count)
    for table in tables:
        for row_id, seq in conn.execute(
            f"SELECT c.row_id, max(c.seq) FROM chain c WHERE c.tbl = '{table}' AND c.seq > ? "
            f"AND NOT EXISTS (SELECT 1 FROM {table} t WHERE t.id = c.row_id) GROUP BY c.row_id",
            (low,),
        ):
            scan.gone(table, row_id, seq)


def _sqlite_wheres(conn: sqlite3.Connection, step_ids: list[str]) -> dict[str, str]:
    marks = ", ".join("?" for _ in step_ids)
    return {
        step_id: f"session {session_id}, #{seq}"
        for step_id, session_id, seq in conn.execute(
            f"SELECT id, session_id, seq FROM steps WHERE id IN ({marks})", step_ids
        )
    }
