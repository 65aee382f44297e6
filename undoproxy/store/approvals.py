"""Approvals as the journal keeps them: the record, its SQL, and recovery after a restart.

An approval is written ahead (committed before the agent starts waiting) and updated once,
when it is decided. Every write goes through the journal's one writer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from typing import Any

from undoproxy.store.journal import Journal

APPROVAL_STATES = ("pending", "approved", "denied", "timed_out", "expired")
_JSON_COLUMNS = {"step_ids", "context"}
RESTART_REASON = "undoproxy restarted before anyone decided; the agent's connection is gone"


@dataclass
class Approval:
    """One held request (or several identical ones of a session) waiting for a person."""

    id: str
    session_id: str
    step_id: str  # the first held request's step
    fingerprint: str  # approvals.grouping.grouping_key: byte-identical requests share it
    method: str
    url: str  # redacted
    created_at: float
    expires_at: float
    rule: str | None = None
    risk: str | None = None
    state: str = "pending"
    step_ids: list[str] = field(default_factory=list)
    decided_at: float | None = None
    decided_by: str | None = None
    reason: str | None = None
    context: dict[str, Any] = field(default_factory=dict)  # body, badges, diff (all redacted)

    def to_row(self) -> dict[str, Any]:
        """Column name -> SQL value."""
        row: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            row[f.name] = json.dumps(value) if f.name in _JSON_COLUMNS else value
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Approval:
        """The Approval a `SELECT *` row describes (columns it does not know are left out)."""
        values = {k: v for k, v in row.items() if k in COLUMNS}
        for name in _JSON_COLUMNS:
            values[name] = json.loads(values[name]) if values.get(name) else None
        values["step_ids"] = values["step_ids"] or []
        values["context"] = values["context"] or {}
        return cls(**values)


COLUMNS = tuple(f.name for f in fields(Approval))
INSERT = (
    f"INSERT INTO approvals ({', '.join(COLUMNS)}) VALUES ({', '.join(':' + c for c in COLUMNS)})"
)
# Only a pending approval can be decided: the first decision holds (on a shared journal the
# writer returns the rows changed, so a decision that came second changed none).
DECIDE = (
    "UPDATE approvals SET state=:state, decided_at=:decided_at, decided_by=:decided_by, "
    "reason=:reason, step_ids=:step_ids WHERE id=:id AND state='pending'"
)
SET_STEPS = "UPDATE approvals SET step_ids=:step_ids WHERE id=:id"


def decide_params(approval: Approval) -> dict[str, Any]:
    """Parameters of DECIDE for an approval's current decision."""
    row = approval.to_row()
    return {k: row[k] for k in ("id", "state", "decided_at", "decided_by", "reason", "step_ids")}


async def load(journal: Journal, approval_id: str) -> Approval | None:
    """One approval by id, as committed."""
    rows = await journal.query("SELECT * FROM approvals WHERE id=?", (approval_id,))
    return Approval.from_row(rows[0]) if rows else None


async def load_many(
    journal: Journal, *, state: str | None = None, session_id: str | None = None, limit: int = 200
) -> list[Approval]:
    """Approvals newest first, optionally of one state and/or one session."""
    where, params = [], []
    if state is not None:
        where.append("state=?")
        params.append(state)
    if session_id is not None:
        where.append("session_id=?")
        params.append(session_id)
    sql = "SELECT * FROM approvals"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = await journal.query(sql + " ORDER BY created_at DESC LIMIT ?", (*params, limit))
    return [Approval.from_row(r) for r in rows]


async def seen_host(journal: Journal, session_id: str, host: str, except_step: str) -> bool:
    """True when the session made an earlier request to `host` (any scheme, any port)."""
    pattern = host.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = await journal.query(
        "SELECT 1 FROM steps WHERE session_id=? AND id<>? AND (lower(url) LIKE ? ESCAPE '\\' "
        "OR lower(url) LIKE ? ESCAPE '\\') LIMIT 1",
        (session_id, except_step, f"%://{pattern}/%", f"%://{pattern}:%"),
    )
    return bool(rows)


async def expire_stale(journal: Journal) -> int:
    """Mark approvals left `pending` by an earlier run `expired`, and their held steps denied.

    Their agents' connections died with that run, so nothing can be forwarded any more.
    Returns how many approvals were expired.
    """
    mine, params = journal.owned  # on a shared journal: this replica's only
    rows = await journal.query(
        f"SELECT count(*) AS n FROM approvals WHERE state='pending' AND {mine}", params
    )
    now = time.time()
    await journal.writer.write(
        "UPDATE approvals SET state='expired', decided_at=?, reason=? "
        f"WHERE state='pending' AND {mine}",
        (now, RESTART_REASON, *params),
    )
    await journal.writer.write(
        f"UPDATE steps SET status='denied', updated_at=?, error=? WHERE status='held' AND {mine}",
        (now, f"expired: {RESTART_REASON}", *params),
    )
    return int(rows[0]["n"])
