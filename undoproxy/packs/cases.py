"""A pack's test cases: what `undoproxy packs test` sends, and what `packs record` writes.

A cases file (or a pack file's `cases:` key) is a list of cases, each:

    - name: update an item                  # free text (default: the request line)
      rule: todo/update-item                # the rule it must match (optional, checked)
      setup:                                # requests sent straight to the server first
        - {method: PUT, path: /items/1, json: {title: first}}
      request: {method: PATCH, path: /items/1, json: {title: changed}}   # through undoproxy
      expect: restored                      # restored | irreversible
      check:                                # reads sent straight to the server before the
        - {method: GET, path: /items/1}     # request and after the rollback: the same answer
      ignore: [updated_at]                  # top-level fields left out of that comparison

A request is `{method, path (or url), headers?, json? | body?}`; a path goes to the server
`--against` names, and so does a full URL (its origin replaced). Pure: parsing and recording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from undoproxy.errors import UndoproxyError

EXPECTS = ("restored", "irreversible")
REQUEST_KEYS = frozenset({"method", "path", "url", "headers", "json", "body"})
CASE_KEYS = frozenset({"name", "rule", "setup", "request", "expect", "check", "ignore"})
MAX_CASES = 200  # a cases file may hold at most this many


@dataclass(frozen=True)
class Call:
    """One request of a case."""

    method: str
    target: str  # a path, or a full URL whose origin is replaced by the server's
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def url(self, base: str) -> str:
        """The URL on the server `base` names."""
        parts = urlsplit(self.target)
        root = urlsplit(base)
        if parts.scheme:  # a recorded URL: same path and query, on the server under test
            return urlunsplit((root.scheme, root.netloc, parts.path, parts.query, ""))
        return base.rstrip("/") + "/" + self.target.lstrip("/")

    @property
    def line(self) -> str:
        parts = urlsplit(self.target)
        return f"{self.method} {parts.path}{'?' + parts.query if parts.query else ''}"


@dataclass(frozen=True)
class Case:
    """One action to run through undoproxy, roll back and judge."""

    name: str
    request: Call
    expect: str = "restored"
    rule: str | None = None
    setup: tuple[Call, ...] = ()
    check: tuple[Call, ...] = ()
    ignore: tuple[str, ...] = ()


def _call(value: Any, where: str) -> Call:
    if not isinstance(value, dict):
        raise UndoproxyError(f"{where}: a request is a mapping {{method, path, json?}}")
    unknown = set(value) - REQUEST_KEYS
    if unknown:
        raise UndoproxyError(f"{where}: unknown key {sorted(unknown)[0]!r} in a request")
    method = value.get("method")
    target = value.get("path") or value.get("url")
    if not isinstance(method, str) or not method.strip():
        raise UndoproxyError(f"{where}: a request needs a method")
    if not isinstance(target, str) or not target:
        raise UndoproxyError(f"{where}: a request needs a path (or url)")
    headers = value.get("headers") or {}
    if not isinstance(headers, dict):
        raise UndoproxyError(f"{where}: headers must be a mapping")
    headers = {str(k): str(v) for k, v in headers.items()}
    body: bytes | None = None
    if "json" in value:
        body = json.dumps(value["json"]).encode()
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    elif value.get("body") is not None:
        body = str(value["body"]).encode()
    return Call(method.strip().upper(), target, headers, body)


def parse_cases(doc: Any, source: str) -> list[Case]:
    """The cases of a cases file (`{cases: [...]}` or a list) or a pack's `cases:` key;
    raises UndoproxyError naming the case and what is wrong."""
    items = doc.get("cases") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise UndoproxyError(f"{source}: no cases (a `cases:` list of requests to run)")
    if len(items) > MAX_CASES:
        raise UndoproxyError(f"{source}: {len(items)} cases; at most {MAX_CASES}")
    out: list[Case] = []
    for n, item in enumerate(items, 1):
        where = f"{source}: case {n}"
        if not isinstance(item, dict):
            raise UndoproxyError(f"{where}: a case is a mapping with a request:")
        unknown = set(item) - CASE_KEYS
        if unknown:
            raise UndoproxyError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        request = _call(item.get("request"), where)
        expect = item.get("expect", "restored")
        if expect not in EXPECTS:
            raise UndoproxyError(f"{where}: expect is one of {', '.join(EXPECTS)}, got {expect!r}")
        lists = {}
        for key in ("setup", "check"):
            value = item.get(key) or []
            if not isinstance(value, list):
                raise UndoproxyError(f"{where}: {key} must be a list of requests")
            lists[key] = tuple(_call(v, f"{where} {key}") for v in value)
        ignore = item.get("ignore") or []
        if not isinstance(ignore, list):
            raise UndoproxyError(f"{where}: ignore must be a list of field names")
        rule = item.get("rule")
        out.append(
            Case(
                name=str(item.get("name") or request.line),
                request=request,
                expect=str(expect),
                rule=str(rule) if rule else None,
                setup=lists["setup"],
                check=lists["check"],
                ignore=tuple(str(i) for i in ignore),
            )
        )
    return out


# --- `packs record`: a journaled session as cases ---------------------------------------------


def _recorded_body(step: dict[str, Any]) -> dict[str, Any]:
    """The request body a step sent, as a case writes it (JSON as json:, else body:)."""
    body = (step.get("request") or {}).get("body")
    if body in (None, ""):
        return {}
    try:
        return {"json": json.loads(body)}
    except (TypeError, ValueError):
        return {"body": body}


def _kept_headers(step: dict[str, Any]) -> dict[str, str]:
    """The request headers worth replaying: what names the action (X-Amz-Target, a
    Content-Type other than JSON), never credentials (give those with -H)."""
    keep = {}
    for pair in (step.get("request") or {}).get("headers") or []:
        name, value = (pair.get("name"), pair.get("value")) if isinstance(pair, dict) else pair
        low = str(name).lower()
        if low.startswith("x-amz-target") or (
            low == "content-type" and "json" not in str(value).lower()
        ):
            keep[str(name)] = str(value)
    return keep


def record(steps: list[dict[str, Any]], session: str) -> dict[str, Any]:
    """A cases document from a session's steps (the admin API's form, oldest first): one case
    per mutation that was forwarded, expecting what its compensation says."""
    cases = []
    for step in steps:
        if step.get("kind") != "mutation" or step.get("status") in ("denied", "held"):
            continue
        comp = step.get("compensation") or {}
        request: dict[str, Any] = {"method": step["method"], "url": step["url"]}
        headers = _kept_headers(step)
        if headers:
            request["headers"] = headers
        request.update(_recorded_body(step))
        case: dict[str, Any] = {"name": f"#{step.get('seq')} {step['method']} {step['url']}"}
        if step.get("rule"):
            case["rule"] = step["rule"]
        case["request"] = request
        case["expect"] = "restored" if comp.get("method") else "irreversible"
        cases.append(case)
    if not cases:
        raise UndoproxyError(f"session {session} has no forwarded mutation to record")
    return {"recorded_from": session, "cases": cases}
