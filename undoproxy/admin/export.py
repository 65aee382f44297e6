"""Session exports, every one with secrets redacted: JSON lines (one step per line), HAR 1.2,
CSV (one row per step, for spreadsheets and audit tools) and a Markdown report.

CSV and Markdown are built from the API's step view (`views.step_json`), so they show exactly
what the API shows, redacted the same way. Each format is written in pieces (`Streamed`: a
head, the text of each page of steps, a tail), so the API streams an export of any size a
page at a time; `har`, `csv_text` and `markdown` assemble the pieces for a list in memory.
"""

from __future__ import annotations

import csv
import datetime
import html
import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from undoproxy import __version__, redact
from undoproxy.admin.views import step_json
from undoproxy.store.records import Session, Step

FORMATS = ("jsonl", "har", "csv", "md")
CSV_COLUMNS = (
    "seq",
    "time",
    "method",
    "url",
    "kind",
    "action",
    "rule",
    "risk",
    "status",
    "response_status",
    "duration_ms",
    "intent",
    "error",
    "request_body",
    "compensation_kind",
    "compensation_method",
    "compensation_url",
    "compensation_status",
    "compensation_detail",
    "step_id",
)


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
    return {"log": {**_har_log(session), "entries": [_entry(s) for s in steps]}}


def _har_log(session: Session) -> dict[str, Any]:
    return {
        "version": "1.2",
        "creator": {"name": "undoproxy", "version": __version__},
        "comment": f"undoproxy session {session.id} ({session.state})",
    }


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="seconds")


def _compact(body: str | None) -> str:
    """A displayed body on one line: JSON without its indentation."""
    if not body:
        return ""
    try:
        return json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return body


def _row(step: Step) -> dict[str, Any]:
    view = step_json(step)
    comp = view["compensation"] or {}
    return {
        "seq": view["seq"],
        "time": _iso(view["created_at"]),
        "method": view["method"],
        "url": view["url"],
        "kind": view["kind"],
        "action": view["action"] or "",
        "rule": view["rule"] or "",
        "risk": view["risk"] or "",
        "status": view["status"],
        "response_status": view["response_status"] or "",
        "duration_ms": "" if view["duration_ms"] is None else view["duration_ms"],
        "intent": redact.text(step.intent) if step.intent else "",
        "error": view["error"] or "",
        "request_body": _compact(view["request"]["body"]),
        "compensation_kind": comp.get("kind") or "",
        "compensation_method": comp.get("method") or "",
        "compensation_url": comp.get("url") or "",
        "compensation_status": comp.get("status") or "",
        "compensation_detail": comp.get("detail") or "",
        "step_id": view["id"],
    }


def _no_formula(value: Any) -> Any:
    # A spreadsheet runs a cell starting with = + - @ as a formula: what an agent sent (an
    # intent, a URL, an error) must stay text when a person opens the export.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def csv_text(steps: list[Step]) -> str:
    """One row per step, with a header row (columns: CSV_COLUMNS)."""
    return _csv_head() + _csv_rows(steps)


def _csv_head() -> str:
    out = io.StringIO()
    csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\r\n").writeheader()
    return out.getvalue()


def _csv_rows(steps: Iterable[Step]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\r\n")
    for step in steps:
        writer.writerow({k: _no_formula(v) for k, v in _row(step).items()})
    return out.getvalue()


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|#"})


def _cell(value: Any) -> str:
    """Text safe in a Markdown table cell: one line, no table or HTML syntax of its own."""
    text = " ".join(str(value).split())
    return html.escape(text, quote=False).translate(_MD_SPECIAL) or " "


def markdown(session: Session, steps: list[Step]) -> str:
    """A Markdown report: the session, then one table row per step."""
    mutations = sum(1 for s in steps if s.is_mutation)
    return _markdown_head(session, len(steps), mutations) + _markdown_rows(steps)


def _markdown_head(session: Session, steps: int, mutations: int) -> str:
    lines = [
        f"# undoproxy session {_cell(session.id)}",
        "",
        f"- state: {_cell(session.state)}",
        f"- created: {_iso(session.created_at)}",
    ]
    if session.intent:
        lines.append(f"- intent: {_cell(redact.text(session.intent))}")
    lines += [f"- steps: {steps} ({mutations} mutations)", ""]
    header = ["#", "time", "request", "kind", "rule", "action", "status", "HTTP", "compensation"]
    header += ["intent"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines) + "\n"


def _markdown_rows(steps: Iterable[Step]) -> str:
    lines = []
    for r in (_row(s) for s in steps):
        comp = f"{r['compensation_method']} {r['compensation_url']}".strip()
        comp = comp or r["compensation_kind"]
        if r["compensation_status"]:
            comp += f" [{r['compensation_status']}]"
        cells = [
            r["seq"],
            r["time"],
            f"{r['method']} {r['url']}",
            r["kind"],
            r["rule"] or "-",
            r["action"] or "-",
            r["status"],
            r["response_status"] or "-",
            comp or "-",
            r["intent"] or "-",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class Streamed:
    """An export in pieces: `head`, then `page(steps, first)` for each page of steps in
    order (`first`: the first page), then `tail`; `content_type` for the answer."""

    content_type: str
    head: str
    page: Callable[[list[Step], bool], str]
    tail: str = ""


def streamed(fmt: str, session: Session, steps: int, mutations: int) -> Streamed:
    """How to write the export of `session` (with `steps` steps, `mutations` of them
    mutations) in the format `fmt` (one of FORMATS)."""
    if fmt == "jsonl":
        return Streamed(
            "application/x-ndjson",
            "",
            lambda page, first: "".join(json.dumps(step_json(s)) + "\n" for s in page),
        )
    if fmt == "csv":
        return Streamed("text/csv", _csv_head(), lambda page, first: _csv_rows(page))
    if fmt == "md":
        return Streamed(
            "text/markdown",
            _markdown_head(session, steps, mutations),
            lambda page, first: _markdown_rows(page),
        )
    head = json.dumps({"log": {**_har_log(session), "entries": []}})
    cut = head.rindex("[]") + 1  # the entries go between the brackets

    def entries(page: list[Step], first: bool) -> str:
        text = ", ".join(json.dumps(_entry(s)) for s in page)
        return text if first or not text else ", " + text

    return Streamed("application/json", head[:cut], entries, head[cut:])
