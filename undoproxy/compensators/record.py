"""The compensation record, typed: what `prepare()`/`complete()` stored with a step.

The journal keeps it as a JSON object (see `build.py` for its keys); `CompensationRecord.of`
reads that object into typed fields for the code that acts on it, and keeps the object itself
(`raw`) so that what is written back never loses a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InverseRequest:
    """One inverse request: what rollback sends (its body base64, as stored)."""

    method: str
    url: str
    body_b64: str | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    expect_ok: bool = False  # a 2xx answer must also say `"ok": true` (Slack)
    forward_credentials: bool = False  # a rule's `credentials: forward`

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> InverseRequest:
        """From the journal's form."""
        return cls(
            method=str(data.get("method") or ""),
            url=str(data.get("url") or ""),
            body_b64=data.get("body_b64") or None,
            content_type=data.get("content_type") or None,
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            expect_ok=bool(data.get("expect_ok")),
            forward_credentials=data.get("credentials") == "forward",
        )


@dataclass(frozen=True)
class CompensationRecord:
    """A step's compensation: the inverse request, or why there is none, and its baselines."""

    raw: dict[str, Any]
    kind: str | None = None
    request: InverseRequest | None = None  # set when ready
    fallback: InverseRequest | None = None  # recreate's POST to the collection
    reason: str | None = None  # why it is irreversible
    noop: str | None = None  # why there is nothing to undo
    snapshot_url: str | None = None
    after: dict[str, Any] | None = None  # what the agent's write produced (drift baseline)
    check_absent: bool = False  # recreate: the target must still be gone
    inferred: bool = False  # chosen by `defaults.compensate: auto`, not by a rule

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> CompensationRecord:
        """From the journal's form (None: nothing was recorded)."""
        raw = dict(data or {})
        ready = bool(raw.get("ready")) and bool(raw.get("method"))
        fallback = raw.get("fallback")
        return cls(
            raw=raw,
            kind=raw.get("kind"),
            request=InverseRequest.of(raw) if ready else None,
            fallback=InverseRequest.of(fallback) if isinstance(fallback, Mapping) else None,
            reason=raw.get("reason") or None,
            noop=raw.get("noop") or None,
            snapshot_url=raw.get("snapshot_url") or None,
            after=raw.get("after") or None,
            check_absent=bool(raw.get("check_absent")),
            inferred=bool(raw.get("inferred")),
        )
