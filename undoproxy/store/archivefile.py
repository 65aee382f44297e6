"""Checking an archive file on its own, in constant memory: `undoproxy verify --archive FILE`.

A file (`archiving` describes it) is gzip members, one per archived batch. Each is checked
line by line: its chain entries link from the cut it started at to the cut it made, each
archived row hashes to the entry just before it (its last), and the digest in its trailer
covers every line before it; each member starts at the cut the one before it made. What the
file says of itself is then compared with the journal's `archives` rows (chained, so they
vouch for the file): the same cut, the same digest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from undoproxy.store import chain
from undoproxy.store.archiving import FORMAT, decode


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
    """What checking a file found: its batches, the recorded heads it holds, its problems."""

    path: Path
    members: list[Member] = field(default_factory=list)
    heads: set[str] = field(default_factory=set)  # of those asked about, the ones it has
    problems: list[str] = field(default_factory=list)


def check_file(path: Path, *, heads: Iterable[str] = ()) -> FileCheck:
    """Check an archive file on its own (see the module docstring)."""
    wanted = set(heads)
    found = FileCheck(path)
    try:
        with gzip.open(path, "rb") as stream:
            member: dict[str, Any] | None = None
            for number, raw in enumerate(stream, 1):
                problem = _line(found, raw, member, wanted)
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
    return found


def _line(
    found: FileCheck, raw: bytes, member: dict[str, Any] | None, wanted: set[str]
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
        if value["undoproxy_archive"] != FORMAT:
            return f"archive format {value['undoproxy_archive']!r} is not one this undoproxy reads"
        before = value["cut_before"]
        if found.members and (before["seq"], before["hash"]) != found.members[-1].cut:
            return f"batch {value['id']} does not start where the one before it ended"
        state = {"header": value, "head": before["hash"], "last": None, "digest": hashlib.sha256()}
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
        if last is None or (last[0], last[1]) != cut or member["entries"] != end["entries"]:
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
        seq, _table, _row_id, _version, prev_hash, digest = value["entry"]
        if prev_hash != member["head"]:
            return f"chain entry {seq} does not follow the one before it"
        member["head"] = digest
        member["last"] = (int(seq), str(digest), str(prev_hash), value["entry"])
        member["entries"] += 1
        if digest in wanted:
            found.heads.add(digest)
        return None
    if "row" in value:
        table, last = value["row"], member["last"]
        row = {k: decode(v) for k, v in value["values"].items()}
        if last is None or last[3][1] != table or last[3][2] != row.get("id"):
            return f"{table} row {row.get('id')} is not after its last chain entry"
        if chain.entry_hash(last[2], chain.canonical(table, row.items())) != last[1]:
            return f"{table[:-1]} {row.get('id')}: its content differs from its chain entry"
        member["counts"][table] = member["counts"].get(table, 0) + 1
        return None
    return "not a line of an archive"


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
