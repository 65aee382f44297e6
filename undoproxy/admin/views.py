"""How sessions and steps are shown through the API, the page and exports: secrets redacted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from undoproxy import redact
from undoproxy.store.records import Session, Step


def session_json(session: Session, counts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A session without its token; with `counts`, its steps, mutations and held steps."""
    out: dict[str, Any] = {
        "id": session.id,
        "intent": session.intent,
        "agent": session.agent,
        "state": session.state,
        "frozen": session.frozen,  # the kill switch of this session (see also frozen_all)
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }
    if counts is not None:
        out["steps"] = counts.get("steps", 0)
        out["mutations"] = counts.get("mutations", 0)
        out["held"] = counts.get("held", 0)  # steps held for a person, whatever was decided
    return out


def _header_value(headers: list[list[str]] | None, name: str) -> str:
    for k, v in headers or []:
        if k.lower() == name:
            return v
    return ""


def _headers(pairs: list[list[str]] | None) -> list[list[str]]:
    # Stored redacted already; again here so rows journaled before a secret name was added
    # to redact.py are shown without it too.
    return [list(p) for p in redact.headers((k, v) for k, v in pairs or [])]


def compensation_json(step: Step) -> dict[str, Any] | None:
    """The compensation of a mutation step: what would undo it, and what became of it."""
    if not step.is_mutation:
        return None
    comp = step.compensation or {}
    return {
        "kind": comp.get("kind"),
        "method": comp.get("method"),
        "url": redact.url(comp["url"]) if comp.get("url") else None,
        "status": step.compensation_status,
        "detail": redact.text(step.compensation_detail)
        if step.compensation_detail
        else step.compensation_detail,
        # Set when no compensation exists: the step is irreversible, and this says why.
        "reason": redact.text(comp["reason"]) if comp.get("reason") else None,
    }


def _stream_of(step: Step) -> dict[str, Any]:
    stream = (step.meta or {}).get("stream")
    if not isinstance(stream, dict):
        return {}
    return {
        "body_sha256": stream.get("sha256"),
        "streamed": True,
        "complete": stream.get("complete"),
    }


def step_json(step: Step) -> dict[str, Any]:
    """A step as the API and exports show it."""
    req_type = _header_value(step.request_headers, "content-type")
    resp_type = _header_value(step.response_headers, "content-type")
    snapshot = step.snapshot
    return {
        "id": step.id,
        "session_id": step.session_id,
        "seq": step.seq,
        "created_at": step.created_at,
        "method": step.method,
        "url": redact.url(step.url),
        "kind": "mutation" if step.is_mutation else "read",
        "intent": redact.text(step.intent) if step.intent else None,
        # What the rule's `record:` kept: model and usage, operation, tool, recipients.
        "meta": redact.json_value(step.meta) if step.meta else None,
        "mutation": step.is_mutation,
        "rule": step.rule,
        "risk": step.risk,
        "action": step.action,
        "captures": redact.json_value(step.captures or {}),
        "status": step.status,
        "response_status": step.response_status,
        "duration_ms": step.duration_ms,
        "error": redact.text(step.error) if step.error else step.error,
        "request": {
            "headers": _headers(step.request_headers),
            "body": redact.body_text(step.request_body, req_type),
            "body_length": step.request_body_len,
            "body_sha256": step.request_body_sha256,
        },
        "response": None
        if step.response_status is None
        else {
            "headers": _headers(step.response_headers),
            "body": redact.body_text(step.response_body, resp_type),
            "body_length": step.response_body_len,
            # A streamed answer's hash and whether it ended (meta.stream); else none kept.
            **_stream_of(step),
        },
        "snapshot": None
        if snapshot is None
        else {
            "url": redact.url(snapshot.get("url", "")),
            "status": snapshot.get("status"),
            "etag": snapshot.get("etag"),
        },
        "compensation": compensation_json(step),
        "resolved": None
        if step.resolved_at is None
        else {
            "by": step.resolved_by,
            "at": step.resolved_at,
            "reason": redact.text(step.resolved_reason or ""),
        },
    }
