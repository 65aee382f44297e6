"""The rows undoproxy journals, as dataclasses; `to_row`/`from_row` are the only mapping to SQL."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field, fields
from typing import Any

from undoproxy import redact
from undoproxy.store import bodies

SESSION_STATES = ("open", "committed", "rolling_back", "rolled_back", "rollback_incomplete")
STEP_STATUSES = (
    "held",
    "denied",
    "pending",
    "succeeded",
    "failed",
    "unknown",
    "compensating",  # written (awaited) before a compensation is sent; a crash leaves it
    "compensated",  # a read-back showed the target as before the step
    "unverified",  # a compensation was accepted but cannot be shown to have taken effect
    "compensation_failed",
    "conflict",
    "irreversible",
    "resolved",  # a person undid it by hand
)


def new_id(prefix: str) -> str:
    """A short random id such as `st_8f3a...`."""
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass
class Session:
    """One agent task: the unit of rollback."""

    id: str
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    intent: str | None = None
    agent: str | None = None
    state: str = "open"
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    frozen: bool = False  # the kill switch: every mutation answered 403, nothing forwarded


_JSON_COLUMNS = {
    "captures",
    "request_headers",
    "response_headers",
    "snapshot",
    "compensation",
    "meta",
}


@dataclass
class Step:
    """One request an agent made, as the journal keeps it (headers already redacted)."""

    id: str
    session_id: str
    seq: int
    method: str
    url: str
    is_mutation: bool
    status: str
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    rule: str | None = None
    risk: str | None = None
    action: str | None = None
    captures: dict[str, str] | None = None
    request_headers: list[list[str]] | None = None
    request_body: bytes | None = None
    request_body_len: int = 0
    request_body_sha256: str | None = None
    response_status: int | None = None
    response_headers: list[list[str]] | None = None
    response_body: bytes | None = None
    response_body_len: int | None = None
    duration_ms: float | None = None
    error: str | None = None
    snapshot: dict[str, Any] | None = None
    compensation: dict[str, Any] | None = None
    compensation_status: str | None = None
    compensation_detail: str | None = None
    credentials: bytes | None = None
    intent: str | None = None  # X-Undoproxy-Intent: why the agent made this call
    meta: dict[str, Any] | None = None  # what a pack recorded: model, usage, operation, tool
    resolved_by: str | None = None  # a person who undid an irreversible step by hand
    resolved_at: float | None = None
    resolved_reason: str | None = None

    def to_row(self, encrypt: bodies.Encrypt) -> dict[str, Any]:
        """Column name -> SQL value (URLs redacted, replayable bodies sealed: see `at_rest`)."""
        row: dict[str, Any] = {}
        for name in STEP_COLUMNS:
            value = getattr(self, name)
            if value is not None and name in _JSON_COLUMNS:
                value = json.dumps(at_rest(name, value, encrypt))
            elif name == "url" and value is not None:
                value = _redact_urls(value)
            elif name == "is_mutation":
                value = int(value)
            row[name] = value
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any], decrypt: bodies.Decrypt) -> Step:
        """The Step a `SELECT *` row describes (sealed bodies opened with `decrypt`; columns
        it does not know, such as PostgreSQL's `replica`, are left out)."""
        values = {k: v for k, v in row.items() if k in _COLUMN_SET}
        for name in _JSON_COLUMNS:
            text = values.get(name)
            if text is not None:
                values[name] = json.loads(text)
                if name in bodies.SEALED_COLUMNS and bodies.SEALED in text:
                    values[name] = bodies.open_bodies(values[name], decrypt)
        values["is_mutation"] = bool(values["is_mutation"])
        return cls(**values)


STEP_COLUMNS = tuple(f.name for f in fields(Step))
_COLUMN_SET = frozenset(STEP_COLUMNS)


def encode_fields(values: dict[str, Any], encrypt: bodies.Encrypt) -> dict[str, Any]:
    """SQL values for a partial update of a step."""
    out = {}
    for k, v in values.items():
        if k not in _COLUMN_SET:
            raise KeyError(f"not a step column: {k}")
        v = at_rest(k, v, encrypt)
        out[k] = json.dumps(v) if k in _JSON_COLUMNS and v is not None else v
    return out


# Columns whose URLs the journal keeps redacted: a secret query parameter (?api_key=) is never
# in the database in clear. What a compensation needs is sealed in `credentials` instead
# (CredentialBox.seal(..., urls=...)) and put back when rollback sends (Credentials.unredact).
_URL_COLUMNS = frozenset({"url", "snapshot", "compensation"})


def at_rest(column: str, value: Any, encrypt: bodies.Encrypt) -> Any:
    """`value` as the journal stores it in `column`: every URL in it redacted, and the bodies
    a compensation replays sealed (`bodies.py`)."""
    if column not in _URL_COLUMNS or value is None:
        return value
    value = _redact_urls(value)
    return bodies.seal(value, encrypt) if column in bodies.SEALED_COLUMNS else value


def _redact_urls(value: Any) -> Any:
    if isinstance(value, str):
        return redact.url(value) if value.startswith(("http://", "https://")) else value
    if isinstance(value, dict):
        return {k: _redact_urls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_urls(v) for v in value]
    return value
