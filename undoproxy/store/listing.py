"""Pages of what grows with traffic: sessions, a session's steps, approvals.

Every list undoproxy shows is read a page at a time, newest first (steps: in order, or newest
first), with keyset cursors: a page costs the same however deep it is and however large the
journal, and a row committed meanwhile neither shifts nor repeats the next page. Each page
carries the list's `total` and the `next` cursor (None on the last page). A cursor is opaque
to callers (URL-safe text); a malformed one raises `BadCursor`.

The limits are here, one number each: `SESSIONS`, `STEPS`, `APPROVALS` (the default page
sizes) and `MAX_PAGE` (the most any page may hold).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from undoproxy.store.approvals import Approval
from undoproxy.store.journal import _WITHOUT_EXCHANGE, Journal
from undoproxy.store.records import Step

T = TypeVar("T")
SESSIONS = 100  # sessions on a page unless asked otherwise
STEPS = 1000  # steps on a page of a session (GET /api/sessions/{id} without ?limit)
APPROVALS = 200  # approvals on a page
MAX_PAGE = 1000  # the most rows a page may hold


class BadCursor(ValueError):
    """A cursor this journal did not hand out."""


@dataclass
class Page(Generic[T]):
    """One page of a list: its rows, how many the whole list has, the next page's cursor."""

    items: list[T]
    total: int
    next: str | None


def encode(*key: Any) -> str:
    """A cursor for a row's sort key."""
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def decode(cursor: str, *types: type) -> tuple[Any, ...]:
    """The sort key a cursor holds, each part of the given type; BadCursor otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor(f"not a cursor of this list: {cursor[:40]!r}") from None
    if not isinstance(key, list) or len(key) != len(types):
        raise BadCursor(f"not a cursor of this list: {cursor[:40]!r}")
    out = []
    for part, kind in zip(key, types, strict=True):
        if kind is float and isinstance(part, int) and not isinstance(part, bool):
            part = float(part)
        if type(part) is not kind:
            raise BadCursor(f"not a cursor of this list: {cursor[:40]!r}")
        out.append(part)
    return tuple(out)


def page_size(value: str | None, default: int) -> int:
    """A `?limit=` value, checked: 1 to MAX_PAGE (ValueError otherwise)."""
    if value is None:
        return default
    if not value.isdigit() or not 1 <= int(value) <= MAX_PAGE:
        raise ValueError(f"limit must be a number from 1 to {MAX_PAGE}")
    return int(value)


# --- sessions -------------------------------------------------------------------------------

SESSION_FIELDS = (
    "s.id, s.intent, s.agent, s.state, s.frozen, s.created_at, s.updated_at, "
    "coalesce(c.steps, 0) AS steps, coalesce(c.mutations, 0) AS mutations, "
    "coalesce(c.held, 0) AS held"
)


async def sessions(
    journal: Journal, *, state: str | None = None, limit: int = SESSIONS, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Sessions newest first (one state, or all), each with its counts: rows of
    `SESSION_FIELDS` (no token)."""
    where, params = _state(state)
    total = (await journal.query(f"SELECT count(*) AS n FROM sessions s{where}", params))[0]["n"]
    keyset = ""
    if cursor is not None:
        created, session_id = decode(cursor, float, str)
        keyset = (" AND " if where else " WHERE ") + (
            "(s.created_at < ? OR (s.created_at = ? AND s.id < ?))"
        )
        params = (*params, created, created, session_id)
    rows = await journal.query(
        f"SELECT {SESSION_FIELDS} FROM sessions s "
        f"LEFT JOIN session_counts c ON c.session_id = s.id{where}{keyset} "
        "ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
        (*params, limit + 1),
    )
    more = len(rows) > limit
    rows = rows[:limit]
    for row in rows:
        row["frozen"] = bool(row["frozen"])
    last = rows[-1] if more else None
    return Page(rows, int(total), encode(last["created_at"], last["id"]) if last else None)


def _state(state: str | None) -> tuple[str, tuple[Any, ...]]:
    return (" WHERE s.state=?", (state,)) if state is not None else ("", ())


# --- a session's steps ----------------------------------------------------------------------


async def steps(
    journal: Journal,
    session_id: str,
    *,
    limit: int = STEPS,
    cursor: str | None = None,
    newest_first: bool = False,
    exchange: bool = True,
) -> Page[Step]:
    """A session's steps in order (or newest first), a page at a time; `exchange=False`
    leaves out headers and bodies (`Journal.steps`)."""
    counted = await journal.step_counts([session_id])
    total = counted.get(session_id, {}).get("steps", 0)
    columns = "*" if exchange else _WITHOUT_EXCHANGE
    sql = f"SELECT {columns} FROM steps WHERE session_id=?"
    params: tuple[Any, ...] = (session_id,)
    if cursor is not None:
        (seq,) = decode(cursor, int)
        sql += " AND seq < ?" if newest_first else " AND seq > ?"
        params = (*params, seq)
    sql += f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?"
    rows = await journal.query(sql, (*params, limit + 1))
    more = len(rows) > limit
    found = [Step.from_row(r, journal.box.decrypt) for r in rows[:limit]]
    return Page(found, int(total), encode(found[-1].seq) if more else None)


# --- approvals ------------------------------------------------------------------------------


async def approvals(
    journal: Journal,
    *,
    state: str | None = None,
    session_id: str | None = None,
    limit: int = APPROVALS,
    cursor: str | None = None,
) -> Page[Approval]:
    """Approvals newest first, optionally of one state and/or one session."""
    conditions: list[str] = []
    params: list[Any] = []
    if state is not None:
        conditions.append("state=?")
        params.append(state)
    if session_id is not None:
        conditions.append("session_id=?")
        params.append(session_id)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    total = (await journal.query(f"SELECT count(*) AS n FROM approvals{where}", params))[0]["n"]
    if cursor is not None:
        created, approval_id = decode(cursor, float, str)
        conditions.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params += [created, created, approval_id]
        where = f" WHERE {' AND '.join(conditions)}"
    rows = await journal.query(
        f"SELECT * FROM approvals{where} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*params, limit + 1),
    )
    more = len(rows) > limit
    found = [Approval.from_row(r) for r in rows[:limit]]
    last = found[-1] if more else None
    return Page(found, int(total), encode(last.created_at, last.id) if last else None)


async def pending_by_session(journal: Journal, session_ids: Sequence[str]) -> dict[str, int]:
    """How many approvals of each of these sessions wait for a decision now."""
    if not session_ids:
        return {}
    marks = ", ".join("?" for _ in session_ids)
    rows = await journal.query(
        "SELECT session_id, count(*) AS n FROM approvals "
        f"WHERE state='pending' AND session_id IN ({marks}) GROUP BY session_id",
        tuple(session_ids),
    )
    return {r["session_id"]: int(r["n"]) for r in rows}
