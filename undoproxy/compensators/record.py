"""The compensation record, typed: what `prepare()`/`complete()` stored with a step.

The journal keeps it as a JSON object (see `build.py` for its keys); `CompensationRecord.of`
reads that object into typed fields for the code that acts on it, and keeps the object itself
(`raw`) so that what is written back never loses a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from undoproxy.bodyfiles import FileBody

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
    body_file: FileBody | None = None  # a body too large for the journal, sent from its file

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
            body_file=FileBody.from_json(data.get("body_file")),
        )


# How a record knows that a step left nothing to undo (`noop_evidence.kind`):
NOTHING_EVIDENCE = {
    "not_forwarded": "undoproxy answered it itself: nothing was forwarded",
    "not_sent": "the connection to the upstream was never made: nothing was sent",
    "read": "a read of the target before the step showed nothing it could change",
    "request": "the request itself could change nothing",
    "answer": "the API's answer reports, item by item, that nothing was done",
}


@dataclass(frozen=True)
class Nothing:
    """Nothing to undo, and the evidence for it (one of NOTHING_EVIDENCE's kinds)."""

    why: str
    kind: str
    detail: str = ""  # e.g. the read: `GET https://… answered 404`

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Nothing | None:
        """From a record's `noop` and `noop_evidence`; None without evidence (a journal
        written before evidence was kept: such a step is decided by a read)."""
        evidence = raw.get("noop_evidence")
        if not raw.get("noop") or not isinstance(evidence, Mapping):
            return None
        kind = str(evidence.get("kind") or "")
        if kind not in NOTHING_EVIDENCE:
            return None
        return cls(str(raw["noop"]), kind, str(evidence.get("detail") or ""))


def nothing(why: str, kind: str, detail: str = "") -> dict[str, Any]:
    """The record's keys for "nothing to undo", with its evidence (see NOTHING_EVIDENCE)."""
    if kind not in NOTHING_EVIDENCE:
        raise ValueError(f"not a kind of evidence: {kind!r}")
    return {"noop": why, "noop_evidence": {"kind": kind, "detail": detail}}


def _with_left(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record's read-back, with what a read right after the step found it left (an RPC
    pack's: `after.left` / `after.left_gone`, see compensators/rpc.py) as its `left`."""
    spec = raw.get("readback")
    if not isinstance(spec, dict):
        return None
    after = raw.get("after")
    if "left_paths" not in spec or not isinstance(after, Mapping) or "left" in spec:
        return spec
    if after.get("left_gone"):
        return {**spec, "left_gone": True}
    if isinstance(after.get("left"), list):
        return {**spec, "left": list(after["left"])}
    return spec


@dataclass(frozen=True)
class CompensationRecord:
    """A step's compensation: the inverse request, or why there is none, and its baselines."""

    raw: dict[str, Any]
    kind: str | None = None
    request: InverseRequest | None = None  # set when ready
    fallback: InverseRequest | None = None  # recreate's POST to the collection
    reason: str | None = None  # why it is irreversible
    noop: str | None = None  # why there is nothing to undo (legacy records: no evidence)
    nothing: Nothing | None = None  # nothing to undo, with its evidence
    snapshot_url: str | None = None
    after: dict[str, Any] | None = None  # what the agent's write produced (drift baseline)
    check_absent: bool = False  # recreate: the target must still be gone
    then: tuple[InverseRequest, ...] = ()  # more requests after `request` (one per label, user)
    readback: dict[str, Any] | None = None  # a pack's read-back (see compensators/readback.py)
    inferred: bool = False  # chosen by `defaults.compensate: auto`, not by a rule
    # where a delete-created's URL came from: `location` (a 201's Location, RFC 9110's word
    # for where the created resource is), `id` (the answer's id appended: a guess to confirm)
    located: str | None = None
    server_fields: tuple[str, ...] = ()  # fields a pack says the server sets on every write
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
            nothing=Nothing.of(raw),
            snapshot_url=raw.get("snapshot_url") or None,
            after=raw.get("after") or None,
            check_absent=bool(raw.get("check_absent")),
            then=tuple(InverseRequest.of(r) for r in raw.get("then") or () if isinstance(r, dict)),
            readback=_with_left(raw),
            inferred=bool(raw.get("inferred")),
            located=raw.get("located") or None,
            server_fields=tuple(str(f) for f in raw.get("server_fields") or ()),
            correction=raw.get("correction") if isinstance(raw.get("correction"), dict) else None,
        )
