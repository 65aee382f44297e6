"""Helpers for the compensator tests: rules from YAML, requests, steps and the inverse request."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any

from undoproxy.compensators.build import Compensation, complete, prepare
from undoproxy.compensators.model import Facts, Plan, Snapshot
from undoproxy.compensators.plan import plan_for
from undoproxy.errors import Location
from undoproxy.rules import RequestView, Rule, parse_rules
from undoproxy.yamlsource import load_text

API = "https://crm.example.test"


def rule(text: str) -> Rule:
    """One rule from a YAML mapping (as written under `rules:`); `name: r` unless it has one."""
    doc = load_text(textwrap.dedent(text), "rule.yaml")
    doc.setdefault("name", "r")
    rules = parse_rules([doc], None, base_dir=Path("."), where=Location("rule.yaml", 0))
    return rules.rules[0]


def as_bytes(body: Any) -> bytes:
    """Bytes as they are; anything else as JSON."""
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def request(method: str, url: str, body: Any = b"") -> RequestView:
    """A RequestView; a body that is not bytes is sent as JSON."""
    return RequestView.from_parts(method, url, {}, as_bytes(body))


def plan(
    rule_text: str | None, method: str, url: str, body: Any = b"", *, auto: bool = True
) -> Plan:
    """The plan of a request as the proxy makes it: the rule must match; captures from it."""
    return step(rule_text, method, url, body, auto=auto)[0]


def step(
    rule_text: str | None,
    method: str,
    url: str,
    body: Any = b"",
    *,
    snap: Snapshot | None = None,
    auto: bool = True,
) -> tuple[Plan, Facts]:
    """The plan and the facts of a request, as the proxy has them before forwarding it."""
    req = request(method, url, body)
    r = rule(rule_text) if rule_text is not None else None
    captures = r.matches(req) if r is not None else {}
    assert captures is not None, f"the rule does not match {method} {url}"
    return plan_for(req, r, captures, auto=auto), facts(
        method, url, body, captures=captures, snap=snap
    )


def snapshot(
    url: str,
    status: int = 200,
    body: Any = b"",
    content_type: str | None = "application/json",
    etag: str | None = None,
) -> Snapshot:
    """What the GET before the mutation saw; a body that is not bytes is JSON."""
    return Snapshot(url, status, as_bytes(body), etag=etag, content_type=content_type)


def facts(
    method: str,
    url: str,
    body: Any = b"",
    *,
    captures: dict[str, str] | None = None,
    snap: Snapshot | None = None,
) -> Facts:
    """A step before its response."""
    return Facts(method, url, captures or {}, as_bytes(body), snap)


def respond(
    f: Facts, status: int = 200, body: Any = b"", headers: dict[str, str] | None = None
) -> Facts:
    """The same step once its response arrived; a body that is not bytes is JSON."""
    f.response_status = status
    f.response_headers = headers or {}
    f.response_body = as_bytes(body)
    return f


def run(
    p: Plan,
    f: Facts,
    status: int = 200,
    body: Any = b"",
    headers: dict[str, str] | None = None,
) -> Compensation:
    """prepare() before forwarding, then complete() with this response."""
    comp = prepare(p, f)
    return complete(p, comp, respond(f, status, body, headers))


def sent(comp: Compensation | dict[str, Any]) -> dict[str, Any]:
    """The inverse request rollback would send: method, url, exact body bytes, content type."""
    out = {
        "method": comp["method"],
        "url": comp["url"],
        "body": base64.b64decode(comp["body_b64"]) if comp.get("body_b64") is not None else None,
        "content_type": comp.get("content_type"),
    }
    if comp.get("headers"):
        out["headers"] = comp["headers"]
    return out


def sent_json(comp: Compensation | dict[str, Any]) -> dict[str, Any]:
    """`sent()` with the body parsed as JSON (None when there is no body)."""
    out = sent(comp)
    if out["body"] is not None:
        out["body"] = json.loads(out["body"])
    return out
