"""Checking an archive file on its own, in constant memory: `undoproxy verify --archive FILE`.

A file (`archiving` describes it) is gzip members, one per archived batch. Each is checked
line by line: its chain entries link from the cut it started at to the cut it made, each
keyed entry's HMAC verifies under the chain key its key_id names (the keys `verify` was
given: `chain_verify.KeyCheck`, as for the journal; an entry under a key not given cannot be
checked, which fails), each archived row matches the entry just before it (its last: its
row_hash, or the SHA-256 hash of an entry from before keyed chains), and the digest in its
trailer covers every line before it; each member starts at the cut the one before it made.
So a file stands on its own: nobody without the key can forge or edit one, digest
recomputed or not. What the file says of itself is then compared with the journal's
`archives` rows (chained and keyed, so they vouch for the file): the same cut, the same
digest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from undoproxy.store.archiving import FORMATS, decode
from undoproxy.store.chain import ChainKey
from undoproxy.store.chain_verify import KeyCheck, row_matches


@dataclass(frozen=True)
class Member:
    """One archived batch as the file has it."""

    id: str
    cut_before: tuple[int, str]
    cut: tuple[int, str]
    sha256: str
    sessions: int
    steps: int
    approvals: int
    entries: int


@dataclass
class FileCheck:
    """What checking a file found: its batches, the recorded heads it holds, its problems,
    and whether any entry is keyed (`keyed`: False for a file of entries from before keyed
    chains only, which vouches for itself no more than an unkeyed journal does: what the
    journal's `archives` rows recorded of it does)."""

    path: Path
    members: list[Member] = field(default_factory=list)
    heads: set[str] = field(default_factory=set)  # of those asked about, the ones it has
    problems: list[str] = field(default_factory=list)
    keyed: bool = False


def check_file(
    path: Path, *, heads: Iterable[str] = (), keys: Mapping[str, ChainKey] | None = None
) -> FileCheck:
    """Check an archive file on its own (see the module docstring), its keyed entries with
    `keys` (the chain keys by id, `chain.keyring`)."""
    wanted = set(heads)
    found = FileCheck(path)
    walk = KeyCheck(keys or {})
    try:
        with gzip.open(path, "rb") as stream:
            member: dict[str, Any] | None = None
            for number, raw in enumerate(stream, 1):
                problem = _line(found, raw, member, wanted, walk)
                if isinstance(problem, dict):
                    member = problem
                elif problem is not None:
                    found.problems.append(f"{path}, line {number}: {problem}")
                    return found
                elif member is not None and member.get("done"):
                    member = None
            if member is not None:
                found.problems.append(f"{path}: the last batch has no end (the file was cut)")
    except (OSError, EOFError, zlib.error) as exc:
        found.problems.append(f"{path}: not a readable archive ({exc})")
    found.keyed = walk.keyed_from is not None
    return found


def _line(
    found: FileCheck,
    raw: bytes,
    member: dict[str, Any] | None,
    wanted: set[str],
    walk: KeyCheck,
) -> str | dict[str, Any] | None:
    """Take one line; a problem, the state of a member that starts, or None."""
    try:
        value = json.loads(raw)
    except ValueError:
        return "not a line of an archive"
    if not isinstance(value, dict):
        return "not a line of an archive"
    if "undoproxy_archive" in value:
        if member is not None:
            return "a batch starts before the one before it ended"
        if value["undoproxy_archive"] not in FORMATS:
            return f"archive format {value['undoproxy_archive']!r} is not one this undoproxy reads"
        before = value["cut_before"]
        if found.members and (before["seq"], before["hash"]) != found.members[-1].cut:
            return f"batch {value['id']} does not start where the one before it ended"
        state = {"header": value, "head": before["hash"], "last": None, "digest": hashlib.sha256()}
        state["format"] = value["undoproxy_archive"]
        state["digest"].update(raw)
        state["counts"] = {"sessions": 0, "steps": 0, "approvals": 0}
        state["entries"] = 0
        return state
    if member is None:
        return "a line outside any batch"
    if "end" in value:
        end = value["end"]
        sha = member["digest"].hexdigest()
        if end.get("sha256") != sha:
            return f"batch {member['header']['id']}: its digest does not match its lines"
        cut = (int(end["cut"]["seq"]), str(end["cut"]["hash"]))
        last = member["last"]
        if last is None or (last[0], last[4]) != cut or member["entries"] != end["entries"]:
            return f"batch {member['header']['id']}: its chain does not end at its cut"
        if any(member["counts"][k] != end.get(k) for k in member["counts"]):
            return f"batch {member['header']['id']}: its counts do not match its rows"
        before = member["header"]["cut_before"]
        found.members.append(
            Member(
                str(member["header"]["id"]),
                (int(before["seq"]), str(before["hash"])),
                cut,
                sha,
                member["counts"]["sessions"],
                member["counts"]["steps"],
                member["counts"]["approvals"],
                member["entries"],
            )
        )
        member["done"] = True
        return None
    member["digest"].update(raw)
    if "entry" in value:
        entry = _entry(value["entry"], member["format"])
        if entry is None:
            return "not a chain entry"
        seq, table, row_id, prev_hash, digest, key_id, row_digest = entry
        if prev_hash != member["head"]:
            return f"chain entry {seq} does not follow the one before it"
        wrong = walk.see(seq, table, row_id, prev_hash, digest, key_id, row_digest)
        if wrong:
            return wrong[0]
        member["head"] = digest
        member["last"] = entry
        member["entries"] += 1
        if digest in wanted:
            found.heads.add(digest)
        return None
    if "row" in value:
        table, last = value["row"], member["last"]
        row = {k: decode(v) for k, v in value["values"].items()}
        if last is None or last[1] != table or last[2] != row.get("id"):
            return f"{table} row {row.get('id')} is not after its last chain entry"
        _, _, _, prev_hash, digest, key_id, row_digest = last
        if not row_matches(table, row.items(), prev_hash, digest, key_id, row_digest):
            return f"{table[:-1]} {row.get('id')}: its content differs from its chain entry"
        member["counts"][table] = member["counts"].get(table, 0) + 1
        return None
    return "not a line of an archive"


Entry = tuple[int, str, str, str, str, str | None, str | None]
# seq, table, row id, prev_hash, hash, key_id, row_hash (both None: an unkeyed entry)


def _entry(value: Any, version: int) -> Entry | None:
    """An entry line's fields (format 1: without key_id and row_hash, all unkeyed), or None
    when it is not one."""
    width = 6 if version == 1 else 8
    if not isinstance(value, list) or len(value) != width:
        return None
    seq, table, row_id, _version, prev_hash, digest, *keyed = value
    key_id, row_digest = keyed if keyed else (None, None)
    texts = (table, row_id, prev_hash, digest)
    if not isinstance(seq, int) or not all(isinstance(t, str) for t in texts):
        return None
    if not all(k is None or isinstance(k, str) for k in (key_id, row_digest)):
        return None
    return (seq, table, row_id, prev_hash, digest, key_id, row_digest)


def against_journal(check: FileCheck, recorded: dict[str, dict[str, Any]]) -> list[str]:
    """Problems between a file's batches and the journal's `archives` rows (id -> row)."""
    problems = []
    for member in check.members:
        row = recorded.get(member.id)
        if row is None:
            problems.append(f"{check.path}: batch {member.id} is not an archive of this journal")
            continue
        if row["sha256"] != member.sha256 or (int(row["chain_seq"]), row["chain_hash"]) != (
            member.cut
        ):
            problems.append(
                f"{check.path}: batch {member.id} differs from what the journal recorded of it"
            )
    return problems
