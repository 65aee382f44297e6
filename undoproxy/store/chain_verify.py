"""What every check of the keyed hash chain (`chain.py`) shares: the problems it reports, and
how one entry's key and one row's content are checked.

Three checks walk the chain: `undoproxy verify` of a journal (`chainscan`, streaming, fed
from SQLite there and from PostgreSQL by `postgres/verify.py`), `verify --archive` of an
archive file (`archivefile`), and archiving itself before it cuts the chain (`archiving`: it
refuses to cut a chain that does not verify). Each walks entries in chain order and gives
each one to a `KeyCheck`, and checks each row against its last entry with `row_matches`:
- a keyed entry whose HMAC does not verify with its key (its prev_hash, table, row id and
  row_hash are all under it): edited, inserted or appended by someone without the key;
- a keyed entry under a key it was not given: it cannot be checked, which is a failure too;
- an unkeyed entry after the keyed ones began: undoproxy did not write it;
- a keying entry (`chain.KEYING_TABLE`) that is not one undoproxy writes;
- a row whose content does not match its last entry: the row_hash of a keyed entry, the
  SHA-256 hash of an unkeyed one (an entry from before keyed chains).
What the walks check besides (links, versions, rows added or deleted, a lost tail) is in
`chainscan`'s docstring; what no check can find, in docs/operations.md ("Verifying the
journal").

Entries from before keyed chains are checked as they were written (SHA-256, links and the
rows' content); the keying entry after them authenticates their head, so they cannot be
rewritten either once it exists. Memory: a `KeyCheck` keeps the ids of the keys it was given
that it saw and the last unknown one, never one item per entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from undoproxy.store.chain import (
    KEYING_ROW,
    KEYING_TABLE,
    ChainKey,
    canonical,
    entry_hash,
    keying_row_hash,
    row_hash,
)

NOUN = {
    "sessions": "session",
    "steps": "step",
    "approvals": "approval",
    "archives": "archive",
    KEYING_TABLE: "chain",
}


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
        return f"{NOUN.get(self.table, self.table)} {self.row_id}{where}: {self.what}"


@dataclass(frozen=True)
class Report:
    """What `verify` saw: how many rows it checked, the chain's head, the problems (the
    first `chainscan.PROBLEMS_KEPT` by position; `more` counts the others), where the keyed
    entries begin, the archive cut the chain starts after and the head an incremental verify
    started from."""

    steps: int
    sessions: int
    approvals: int
    entries: int
    head: str
    problems: list[Problem]
    more: int = 0
    # The seq of the first keyed entry checked (or of the head verified from, when keyed);
    # None: no entry checked is keyed.
    keyed_from: int | None = None
    unkeyed: int = 0  # entries checked before it (all of them when none is keyed)
    key_ids: tuple[str, ...] = ()  # the chain keys its entries name, in order of appearance
    archive: str | None = None
    since: str | None = None


class NoChain(Exception):
    """The journal has no chain table yet (no undoproxy with migration 004 has opened it)."""


@dataclass
class KeyCheck:
    """The keys of the chain's entries, checked one entry at a time in chain order.

    `keys`: the chain keys by id (`chain.keyring`). `keyed_before`: the walk starts after a
    keyed entry (an incremental verify from a keyed head), so every entry must be keyed."""

    keys: Mapping[str, ChainKey]
    keyed_before: bool = False
    keyed_from: int | None = None
    unkeyed: int = 0  # entries seen before the first keyed one
    key_ids: dict[str, None] = field(default_factory=dict)  # seen, in order (ids of `keys`)
    _unknown: str | None = None  # the key of the last entry under a key not given

    def see(
        self,
        seq: int,
        table: str,
        row_id: str,
        prev_hash: str,
        digest: str,
        key_id: str | None,
        row_digest: str | None,
    ) -> list[str]:
        """Check the next entry's key; what is wrong with it (each the `what` of a
        problem of this entry), none when it is in order."""
        wrong: list[str] = []
        if key_id is None:
            self._unknown = None
            if self.keyed_from is None and not self.keyed_before:
                self.unkeyed += 1
            else:
                began = (
                    f"at entry {self.keyed_from}"
                    if self.keyed_from is not None
                    else "before the head verified from"
                )
                wrong.append(
                    f"chain entry {seq} has no key, after keyed entries began {began}: "
                    "undoproxy did not write it (or one from before keyed chains did)"
                )
        else:
            wrong += self._keyed(seq, table, row_id, prev_hash, digest, key_id, row_digest)
        if table == KEYING_TABLE and (
            row_id != KEYING_ROW or key_id is None or row_digest != keying_row_hash(key_id)
        ):
            wrong.append(f"chain entry {seq} is not undoproxy's")
        return wrong

    def _keyed(
        self,
        seq: int,
        table: str,
        row_id: str,
        prev_hash: str,
        digest: str,
        key_id: str,
        row_digest: str | None,
    ) -> list[str]:
        if self.keyed_from is None:
            self.keyed_from = seq
        key = self.keys.get(key_id)
        if key is None:
            if key_id == self._unknown:
                return []  # said once for the run of entries under that key
            self._unknown = key_id
            return [
                f"chain entries from {seq} on are keyed with chain key {key_id}, which verify "
                "was not given (the credentials key of the undoproxy that wrote them): they "
                "cannot be checked"
            ]
        self._unknown = None
        self.key_ids.setdefault(key_id)
        if key.entry_hash(prev_hash, table, row_id, row_digest or "") != digest:
            return [
                f"chain entry {seq} does not verify with its key: it was edited, or written "
                "by someone without the key (inserted or appended)"
            ]
        return []

    def start_after(self, key_id: str | None, seq: int) -> None:
        """The walk starts after entry `seq` (the head verified from), keyed with `key_id`
        (None: unkeyed, so keyed entries may still begin)."""
        if key_id is not None:
            self.keyed_before = True
            self.keyed_from = seq
            self.key_ids.setdefault(key_id)

    def keys_lost(self, entries: int, head: str, *, keyed_by_migration: bool) -> Problem | None:
        """The problem of a chain that has entries, none of them keyed, though the journal
        records the migration that keyed it (its keyed entries were rewritten without the
        key); None when that is not so."""
        if self.keyed_from is not None or not entries or not keyed_by_migration:
            return None
        what = (
            "no chain entry is keyed, though undoproxy keyed this journal: its keyed entries "
            "were removed or rewritten without the key (or undoproxy stopped between upgrading "
            "the journal and keying it: start it once more)"
        )
        return Problem((0, 1), KEYING_TABLE, head, what)


def row_matches(
    table: str,
    row: Iterable[tuple[str, Any]],
    prev_hash: str,
    digest: str,
    key_id: str | None,
    row_digest: str | None,
) -> bool:
    """Whether a row (its columns as stored) is what its last entry says it was: that
    entry's row_hash when it is keyed, else its SHA-256 hash (from before keyed chains)."""
    payload = canonical(table, row)
    if key_id is None:
        return entry_hash(prev_hash, payload) == digest
    return row_hash(payload) == row_digest
