"""`undoproxy verify`: the journal's keyed hash chain (`chain.py`) checked against its rows.

Given the chain key (the credentials key's, `chain.keyring`), in one read transaction, so it
works while undoproxy runs, `check` finds:
- an entry edited, inserted or appended: a keyed entry whose HMAC does not verify (its
  prev_hash, table, row id and row_hash are all under it), or an unkeyed entry after the
  keyed ones began; an entry deleted or moved: a link broken (each entry's prev_hash is the
  hash of the entry before it), and a row's versions that do not follow each other 1, 2, 3;
- a row edited: recomputed as stored, it does not match the row_hash of its last entry (an
  unkeyed last entry: its SHA-256 hash);
- a row added or deleted: a row with no entry, an entry whose row is gone;
- a chain that lost its keys: the journal records the migration that keyed it, and no entry
  is keyed;
- entries keyed with a key it was not given: they cannot be checked, which is a failure too.
Entries from before keyed chains are checked as they were written (SHA-256, links and the
rows' content); the keying entry after them authenticates their head, so they cannot be
rewritten either once it exists. What it cannot find is in chain.py's docstring and
docs/operations.md ("Verifying the journal"). `check` is the same for every store; `verify`
feeds it from an SQLite file, `postgres/verify.py` from a PostgreSQL journal.
"""

from __future__ import annotations

import bisect
import dataclasses
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from undoproxy.store.chain import (
    GENESIS,
    KEYED_MIGRATION,
    KEYING_ROW,
    KEYING_TABLE,
    TABLES,
    ChainKey,
    canonical,
    entry_hash,
    keying_row_hash,
    row_hash,
)

_NOUN = {"sessions": "session", "steps": "step", "approvals": "approval", KEYING_TABLE: "chain"}


@dataclass(frozen=True)
class Problem:
    """One thing `verify` found wrong; `position` orders problems (chain seq, then rowid)."""

    position: tuple[int, int]
    table: str
    row_id: str
    what: str
    where: str = ""  # e.g. "session s1, #3" for a step still in the journal

    def __str__(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"{_NOUN.get(self.table, self.table)} {self.row_id}{where}: {self.what}"


@dataclass(frozen=True)
class Report:
    """What `verify` saw: how many rows it checked, the chain's head, where its keyed entries
    begin (None: it has none), and the problems."""

    steps: int
    sessions: int
    approvals: int
    entries: int
    head: str
    problems: list[Problem]
    keyed_from: int | None = None  # the seq of the first keyed entry
    unkeyed: int = 0  # entries before it (all of them when none is keyed)
    key_ids: tuple[str, ...] = ()  # the chain keys its entries name, in order of appearance


class NoChain(Exception):
    """The journal has no chain table yet (no undoproxy with migration 004 has opened it)."""


def verify(
    path: Path, *, heads: Iterable[str] = (), keys: Mapping[str, ChainKey] | None = None
) -> Report:
    """Check the chain of the journal at `path`, read-only (undoproxy may be running).

    `heads`: hashes an earlier verify printed; the chain must still contain each of them (what
    came before a recorded head cannot be rewritten without losing it). `keys`: the chain keys
    by id (`chain.keyring`); a keyed entry under a key not given cannot be checked, and is a
    problem. Raises sqlite3.Error when the file cannot be read as a journal, NoChain without
    a chain.
    """
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None)
    # A text column edited into invalid UTF-8 must be reported, not crash the check.
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("BEGIN")  # one snapshot: the rows and the chain as of one commit
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='chain'").fetchone():
            if _migrated(conn, "004_chain"):
                raise NoChain(f"{path} had a hash chain, and its chain table was dropped")
            raise NoChain(f"{path} has no hash chain yet: start undoproxy once to add it")
        columns = {r[1] for r in conn.execute("PRAGMA table_info(chain)")}
        keyed = "key_id, row_hash" if {"key_id", "row_hash"} <= columns else "NULL, NULL"
        report = check(
            conn.execute(
                f"SELECT seq, tbl, row_id, version, prev_hash, hash, {keyed} "
                "FROM chain ORDER BY seq"
            ),
            lambda table: _sqlite_rows(conn, table),
            keys or {},
            keyed_by_migration=_migrated(conn, KEYED_MIGRATION),
        )
        missing = [
            missing_head(head)
            for head in heads
            if not conn.execute("SELECT 1 FROM chain WHERE hash=?", (head,)).fetchone()
        ]
        return dataclasses.replace(report, problems=missing + report.problems)
    finally:
        conn.close()


def _migrated(conn: sqlite3.Connection, name: str) -> bool:
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='migrations'").fetchone():
        return False
    return bool(conn.execute("SELECT 1 FROM migrations WHERE name=?", (name,)).fetchone())


def missing_head(head: str) -> Problem:
    """The problem of a recorded head (`--head`) that the chain no longer contains."""
    return Problem(
        (0, 0),
        "chain",
        head,
        "this head, recorded earlier, is no longer in the chain: it was rewritten or cut",
    )


def _sqlite_rows(conn: sqlite3.Connection, table: str) -> Iterator[tuple[int, dict[str, Any]]]:
    cur = conn.execute(f"SELECT rowid AS _rowid, * FROM {table} ORDER BY rowid")
    names = [d[0] for d in cur.description][1:]
    for rowid, *values in cur:
        yield rowid, dict(zip(names, values, strict=True))


# seq, tbl, row_id, version, prev_hash, hash, key_id, row_hash (both None: an unkeyed entry)
Entry = tuple[int, str, str, int, str, str, str | None, str | None]
_Last = tuple[int, int, str, str, str | None, str | None]  # seq, version, prev, hash, key, row


class _Entries:
    """The walk over the chain's entries, in order: links, keys and versions."""

    def __init__(self, keys: Mapping[str, ChainKey]) -> None:
        self.keys = keys
        self.problems: list[Problem] = []
        self.breaks: list[int] = []  # chain seqs where a link is broken
        self.gaps: list[tuple[int, int, Problem]] = []  # a missing version: between these seqs
        self.last: dict[tuple[str, str], _Last] = {}  # each row's last entry
        self.keyed_from: int | None = None
        self.key_ids: dict[str, None] = {}
        self.unknown_keys: set[str] = set()
        self.unkeyed = 0  # entries before the first keyed one
        self.head, self.count, self._before = GENESIS, 0, "the start"

    def see(self, entry: Entry) -> None:
        """Check one entry (the next in order)."""
        seq, table, row_id, version, prev_hash, digest, key_id, row_digest = entry
        self.count += 1
        if prev_hash != self.head:
            self.breaks.append(seq)
            self._problem(
                seq,
                table,
                row_id,
                f"chain entry {seq} does not follow {self._before} "
                "(an entry was deleted, inserted, moved or edited)",
            )
        self.head, self._before = digest, f"entry {seq} ({_NOUN.get(table, table)} {row_id})"
        if key_id is None:
            if self.keyed_from is None:
                self.unkeyed += 1
            else:
                self._problem(
                    seq,
                    table,
                    row_id,
                    f"chain entry {seq} has no key, after keyed entries began at entry "
                    f"{self.keyed_from}: undoproxy did not write it (or one from before keyed "
                    "chains did)",
                )
        else:
            self._keyed(seq, table, row_id, prev_hash, digest, key_id, row_digest)
        if table == KEYING_TABLE:
            if row_id != KEYING_ROW or key_id is None or row_digest != keying_row_hash(key_id):
                self._problem(seq, table, row_id, f"chain entry {seq} is not undoproxy's")
            return
        before = self.last.get((table, row_id))
        expected = before[1] + 1 if before else 1
        if version > expected:
            what = f"version {expected} is missing from the chain (a chain entry was deleted)"
            gap = Problem((seq, -1), table, row_id, what)
            self.gaps.append((before[0] if before else 0, seq, gap))
        elif version < expected:
            what = f"chain entry {seq} is version {version}, after version {expected - 1}"
            self._problem(seq, table, row_id, what + " (entries were moved or edited)")
        self.last[(table, row_id)] = (seq, version, prev_hash, digest, key_id, row_digest)

    def _keyed(
        self,
        seq: int,
        table: str,
        row_id: str,
        prev_hash: str,
        digest: str,
        key_id: str,
        row_digest: str | None,
    ) -> None:
        if self.keyed_from is None:
            self.keyed_from = seq
        self.key_ids.setdefault(key_id)
        key = self.keys.get(key_id)
        if key is None:
            if key_id not in self.unknown_keys:
                self.unknown_keys.add(key_id)
                self._problem(
                    seq,
                    table,
                    row_id,
                    f"chain entries from {seq} on are keyed with chain key {key_id}, which "
                    "verify was not given (the credentials key of the undoproxy that wrote "
                    "them): they cannot be checked",
                )
        elif key.entry_hash(prev_hash, table, row_id, row_digest or "") != digest:
            self._problem(
                seq,
                table,
                row_id,
                f"chain entry {seq} does not verify with its key: it was edited, or written "
                "by someone without the key (inserted or appended)",
            )

    def _problem(self, seq: int, table: str, row_id: str, what: str) -> None:
        self.problems.append(Problem((seq, 0), table, row_id, what))

    def placed_gaps(self) -> list[Problem]:
        """Each missing version, placed where the first broken link after the row's previous
        entry is (that is where the deleted entry sat)."""
        out = []
        for after, seq, gap in self.gaps:
            i = bisect.bisect_left(self.breaks, after + 1)
            at = self.breaks[i] if i < len(self.breaks) and self.breaks[i] <= seq else seq
            out.append(dataclasses.replace(gap, position=(at, -1)))
        return out


def check(
    chain: Iterable[Entry],
    rows: Callable[[str], Iterable[tuple[int, dict[str, Any]]]],
    keys: Mapping[str, ChainKey],
    *,
    keyed_by_migration: bool = False,
) -> Report:
    """Check the chain's entries (in order) against each table's rows, as (position, row)
    pairs with every column; the same check for every store (see the module docstring).
    `keyed_by_migration`: the journal records the migration that keyed it, so a chain with
    entries but none keyed lost them."""
    walk = _Entries(keys)
    for entry in chain:
        walk.see(entry)
    problems = walk.problems + walk.placed_gaps()
    if walk.keyed_from is None and walk.count and keyed_by_migration:
        what = (
            "no chain entry is keyed, though undoproxy keyed this journal: its keyed entries "
            "were removed or rewritten without the key (or undoproxy stopped between upgrading "
            "the journal and keying it: start it once more)"
        )
        problems.append(Problem((0, 1), "chain", walk.head, what))
    counts = {}
    wheres: dict[tuple[str, str], str] = {}  # where each step is, to name it in any problem
    for table in TABLES:
        n = 0
        for rowid, row in rows(table):
            n += 1
            where = f"session {row['session_id']}, #{row['seq']}" if table == "steps" else ""
            wheres[(table, row["id"])] = where
            found = walk.last.pop((table, row["id"]), None)
            if found is None:
                what = "not in the chain: added to the database outside undoproxy"
                problems.append(Problem((2**62, rowid), table, row["id"], what, where))
                continue
            seq, _, prev_hash, digest, key_id, row_digest = found
            payload = canonical(table, row.items())
            if key_id is None:
                matches = entry_hash(prev_hash, payload) == digest
            else:
                matches = row_hash(payload) == row_digest
            if not matches:
                what = (
                    f"its content differs from what undoproxy journaled (chain entry {seq}): "
                    "the row was edited outside undoproxy"
                )
                problems.append(Problem((seq, 1), table, row["id"], what, where))
        counts[table] = n
    for (table, row_id), (seq, *_) in walk.last.items():
        what = f"deleted: the chain has it (entry {seq}), the journal does not"
        problems.append(Problem((seq, 2), table, row_id, what))
    problems = sorted(
        (
            dataclasses.replace(p, where=p.where or wheres.get((p.table, p.row_id), ""))
            for p in problems
        ),
        key=lambda p: p.position,
    )
    return Report(
        steps=counts["steps"],
        sessions=counts["sessions"],
        approvals=counts["approvals"],
        entries=walk.count,
        head=walk.head,
        problems=problems,
        keyed_from=walk.keyed_from,
        unkeyed=walk.unkeyed,
        key_ids=tuple(walk.key_ids),
    )
