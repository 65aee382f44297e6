"""The compensation record, typed: what `prepare()`/`complete()` stored with a step.

The journal keeps it as a JSON object (see `build.py` for its keys); `CompensationRecord.of`
reads that object into typed fields for the code that acts on it, and keeps the object itself
(`raw`) so that what is written back never loses a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

UNREADABLE_BODY = (
    "the body this compensation must send is encrypted with another credentials key (the "
    "journal was opened by an installation whose state dir key differs): it cannot be sent; "
    "restore the original key (UNDOPROXY_CREDENTIALS_KEY or <state_dir>/credentials.key) or "
    "undo this step by hand"
)


def _body_unreadable(raw: Mapping[str, Any]) -> bool:
    """True when the store could not open a sealed body of this record (store/bodies.py)."""
    parts: list[Any] = [raw, raw.get("fallback"), *(raw.get("then") or ())]
    return any(isinstance(p, Mapping) and p.get("body_unreadable") for p in parts)


@dataclass(frozen=True)
class InverseRequest:
    """One inverse request: what rollback sends (its body base64, as stored)."""

    method: str
    url: str
    body_b64: str | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    expect_ok: bool = False  # a 2xx answer must also say `"ok": true` (Slack)
    # Slack errors that say the undo already holds (`message_not_found` for chat.delete)
    ok_errors: tuple[str, ...] = ()
    says_repeatable: bool = False  # a pack says sending it twice leaves the same state (Slack)
    # its body was sealed with another credentials key (store/bodies.py): it cannot be sent
    body_unreadable: bool = False
    forward_credentials: bool = False  # a rule's `credentials: forward`

    @property
    def repeatable(self) -> bool:
        """Safe to send again once a read shows it did not take effect: an idempotent method,
        an Idempotency-Key (Stripe answers a repeat with the first answer), or a pack's word."""
        return (
            self.says_repeatable
            or self.method.upper() in ("PUT", "PATCH", "DELETE")
            or any(k.lower() == "idempotency-key" for k in self.headers)
        )

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
            ok_errors=tuple(str(e) for e in data.get("ok_errors") or ()),
            says_repeatable=bool(data.get("repeatable")),
            forward_credentials=data.get("credentials") == "forward",
            body_unreadable=bool(data.get("body_unreadable")),
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
    then: tuple[InverseRequest, ...] = ()  # more requests after `request` (one per label, user)
    readback: dict[str, Any] | None = None  # a pack's read-back (see compensators/readback.py)
    inferred: bool = False  # chosen by `defaults.compensate: auto`, not by a rule
    correction: dict[str, Any] | None = None  # the email pack's (see rollback/correction.py)

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> CompensationRecord:
        """From the journal's form (None: nothing was recorded)."""
        raw = dict(data or {})
        sealed_away = _body_unreadable(raw)
        ready = bool(raw.get("ready")) and bool(raw.get("method")) and not sealed_away
        fallback = raw.get("fallback")
        return cls(
            raw=raw,
            kind=raw.get("kind"),
            request=InverseRequest.of(raw) if ready else None,
            fallback=InverseRequest.of(fallback) if isinstance(fallback, Mapping) else None,
            reason=UNREADABLE_BODY if sealed_away else raw.get("reason") or None,
            noop=raw.get("noop") or None,
            snapshot_url=raw.get("snapshot_url") or None,
            after=raw.get("after") or None,
            check_absent=bool(raw.get("check_absent")),
            then=tuple(InverseRequest.of(r) for r in raw.get("then") or () if isinstance(r, dict)),
            readback=raw.get("readback") if isinstance(raw.get("readback"), dict) else None,
            inferred=bool(raw.get("inferred")),
            correction=raw.get("correction") if isinstance(raw.get("correction"), dict) else None,
        )

