"""Session exports: JSON lines (one step per line) and HAR 1.2, both with secrets redacted."""

from __future__ import annotations

import datetime
import json
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from undoproxy import __version__, redact
from undoproxy.store.records import Session, Step

FORMATS = ("jsonl", "har")


def _headers(pairs: list[list[str]] | None) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in redact.headers((k, v) for k, v in pairs or [])]


def _content_type(pairs: list[list[str]] | None) -> str:
    return next((v for k, v in pairs or [] if k.lower() == "content-type"), "")


def _entry(step: Step) -> dict[str, Any]:
    url = redact.url(step.url)
    started = datetime.datetime.fromtimestamp(step.created_at, datetime.UTC)
    request_type = _content_type(step.request_headers)
    response_type = _content_type(step.response_headers)
    entry: dict[str, Any] = {
        "startedDateTime": started.isoformat(),
        "time": step.duration_ms or 0,
        "request": {
            "method": step.method,
            "url": url,
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _headers(step.request_headers),
            "queryString": [
                {"name": k, "value": v}
                for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)
            ],
            "headersSize": -1,
            "bodySize": step.request_body_len,
        },
        "response": {
            "status": step.response_status or 0,
            "statusText": "",
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _headers(step.response_headers),
            "content": {
                "size": step.response_body_len or 0,
                "mimeType": response_type,
                "text": redact.body_text(step.response_body, response_type) or "",
            },
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": step.response_body_len or -1,
        },
        "cache": {},
        "timings": {"send": 0, "wait": step.duration_ms or 0, "receive": 0},
        "_undoproxy": {
            "step": step.id,
            "seq": step.seq,
            "status": step.status,
            "rule": step.rule,
            "compensation_status": step.compensation_status,
        },
    }
    if step.request_body is not None:
        entry["request"]["postData"] = {
            "mimeType": request_type,
            "text": _as_sent(step.request_body, request_type),
        }
    return entry


def _as_sent(body: bytes, content_type: str) -> str:
    """The request body as it was sent (not re-serialised), secrets hidden; where hiding them
    in place cannot be shown complete, the redacted display form instead."""
    kind = content_type.lower()
    try:
        decoded = body.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is None or "multipart/" in kind:
        return redact.body_text(body, content_type) or ""
    if "x-www-form-urlencoded" in kind:
        return redact.query(decoded)
    shown = redact.text(decoded)
    try:
        json.loads(decoded)
    except (ValueError, RecursionError):
        return shown  # not JSON (or too deep to parse): text as sent, secrets hidden in place
    try:
        parsed = json.loads(shown)
    except (ValueError, RecursionError):
        parsed = None
    # JSON hidden in place must still be JSON and leave nothing the structural redaction
    # would hide; else the redacted display form.
    if parsed is None or redact.json_value(parsed) != parsed:
        return redact.body_text(body, content_type) or ""
    return shown


def har(session: Session, steps: list[Step]) -> dict[str, Any]:
    """A HAR 1.2 log of a session."""
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "undoproxy", "version": __version__},
            "comment": f"undoproxy session {session.id} ({session.state})",
            "entries": [_entry(s) for s in steps],
        }
    }
