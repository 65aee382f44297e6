"""A compensation written out in a pack or a rule, for APIs whose reads are not a GET of the
written URL (RPC: one `POST` whose body names the action; a key-value store's range read):
read before, undo from that read, read back to prove it (pure).

    compensate:
      read:                          # sent before the step, and again after the undo
        method: POST                 # default GET
        url: /v3/kv/range            # captures and ${request.body...} only: sent before;
                                     # no url: the request's own URL
        headers: {Content-Type: application/json}
        body: {key: "${request.body.key}"}
        absent: {"$.kvs": {exists: false}}   # the answer means "no such thing" (also: any
                                             # 404/410); `status: [400]` for an API that
                                             # answers it with an error status
        compare: ["$.kvs[*].key", "$.kvs[*].value"]   # what must read as before
                                                     # (default: the whole answer)
      undo:                          # the target existed: ${snapshot.body...} is the read
        method: POST
        url: /v3/kv/put
        body: {key: "${request.body.key}", value: "${snapshot.body.kvs[0].value}"}
        repeatable: true             # sending it twice leaves the same state (a put)
                                     # (`form: {name: value}` instead of `body`: an HTML
                                     # form body, each value encoded)
      undo_absent:                   # it did not: what removes what the step made;
        method: POST                 # left out: the step can change nothing that was
        url: /v3/kv/deleterange      # absent (a delete), so there is nothing to undo
        body: {key: "${request.body.key}"}

The read's answer is stored with the step (`reads.rpc`); the undo's read-back sends the same
read and checks the `compare` fields against it (an absent target: that it is absent again).
Only that read makes the step `compensated` (rollback/verify.py).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode, urljoin

from undoproxy.compensators import readback
from undoproxy.compensators.model import (
    Facts,
    Irreversible,
    NothingToUndo,
    PreRead,
    Snapshot,
    parse_json,
)
from undoproxy.compensators.model import inverse_request as request
from undoproxy.rules.jsonpaths import simple_path
from undoproxy.rules.templates import (
    TemplateContext,
    TemplateError,
    render_template,
    render_url,
    to_text,
)

READ = "rpc"  # the name of the read in Facts.reads and the step's `reads`
SPEC_KEYS = frozenset({"read", "undo", "undo_absent"})
READ_KEYS = frozenset({"method", "url", "headers", "body", "form", "absent", "compare"})
UNDO_KEYS = frozenset({"method", "url", "headers", "body", "form", "repeatable"})


def is_spec(value: Any) -> bool:
    """True when a `compensate:` mapping is this kind (it has a `read:`)."""
    return isinstance(value, dict) and "read" in value


def _context(facts: Facts, before: Any = None, *, response: bool = False) -> TemplateContext:
    return TemplateContext(
        captures=facts.captures,
        request_body=facts.request_fields,
        response_body=facts.response_json if response else None,
        response_headers=facts.response_headers if response else {},
        snapshot_body=before,
    )


def _rendered(
    spec: dict[str, Any], facts: Facts, ctx: TemplateContext, what: str
) -> tuple[str, str, dict[str, str], bytes, str | None]:
    """(method, absolute url, headers, body, content type) of a written request."""
    try:
        # No url: the request's own (a store whose paths do not fit a template: /a/b/c.txt).
        url = render_url(str(spec["url"]), ctx) if spec.get("url") else facts.url
        rendered = render_template(spec.get("headers") or {}, ctx)
        headers = {str(k): str(v) for k, v in rendered.items()}
        body = render_template(spec["body"], ctx) if "body" in spec else None
        form = render_template(spec["form"], ctx) if "form" in spec else None
    except TemplateError as exc:
        raise Irreversible(f"the pack's {what} cannot be filled in: {exc}") from None
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if form is not None:  # an HTML form body (etcd v2, Stripe, Slack): each value encoded
        raw = urlencode({str(k): to_text(v) for k, v in form.items()}).encode()
        content_type = content_type or "application/x-www-form-urlencoded"
    elif body is None:
        raw = b""
    elif isinstance(body, str):
        raw = body.encode()
        content_type = content_type or "text/plain; charset=utf-8"
    else:
        raw = json.dumps(body).encode()
        content_type = content_type or "application/json"
    method = str(spec.get("method") or "GET").upper()
    return method, urljoin(facts.url, url), headers, raw, content_type


def absent_when(read: dict[str, Any]) -> dict[str, Any]:
    """The read's `absent:` as a read-back's `absent_when` (compensators/readback.py)."""
    absent = dict(read.get("absent") or {})
    statuses = absent.pop("status", None)
    if statuses is None:
        statuses = [200, 201, 204] if absent else []
    elif not isinstance(statuses, list):
        statuses = [statuses]
    return readback.absent_when([int(s) for s in statuses], absent) if statuses else {}


def reads(spec: dict[str, Any], facts: Facts) -> list[PreRead]:
    """The read before the step (its answer: `Facts.reads["rpc"]`)."""
    read = dict(spec.get("read") or {})
    method, url, headers, body, content_type = _rendered(
        read, facts, _context(facts), "read before the step"
    )
    if content_type and body:
        headers["Content-Type"] = content_type
    return [PreRead(READ, method, url, headers, body, absent_when=absent_when(read) or None)]


def _paths(read: dict[str, Any]) -> list[list[str | int]]:
    """The `compare:` JSONPaths as read-back paths ([[]]: the whole answer)."""
    out: list[list[str | int]] = []
    for text in read.get("compare") or []:
        path = simple_path(str(text))
        if path is None:
            raise Irreversible(f"compare path {text!r} is not a simple JSONPath")
        out.append(path)
    return out or [[]]


def _readback(read: dict[str, Any], snap: Snapshot, facts: Facts) -> dict[str, Any]:
    """The read again, and what it must show: the compared fields as before, or absence."""
    method, url, headers, body, content_type = _rendered(read, facts, _context(facts), "read-back")
    if content_type and body:
        headers["Content-Type"] = content_type
    spec = readback.rpc_read(method, url, body, headers, absent_when(read) or None)
    # What the step left is read right after it (proxy/snapshots.py): the drift check before
    # the undo compares these fields with it (`left`), so that a change made since by someone
    # else is a conflict, never overwritten.
    spec["left_paths"] = _paths(read)
    if not snap.existed:
        spec["gone"] = True
        return spec
    before = parse_json(snap.body)
    if before is None:
        raise Irreversible("the read before the step did not answer JSON: nothing to compare")
    spec["expect"] = [readback.same_digest(p, readback.value_at(before, p)) for p in _paths(read)]
    return spec


def build(spec: dict[str, Any], facts: Facts) -> dict[str, Any]:
    """The undo, from the read before the step, with its read-back. Raises Irreversible,
    NothingToUndo."""
    snap = facts.reads.get(READ)
    if snap is None:
        raise Irreversible("the read before the step was not made, so the prior state is unknown")
    read = dict(spec.get("read") or {})
    if snap.existed:
        undo = spec.get("undo")
        if not isinstance(undo, dict):
            raise Irreversible("the pack gives no undo for a target that existed before")
        what = "undo"
    else:
        undo = spec.get("undo_absent")
        if not isinstance(undo, dict):
            raise NothingToUndo(
                f"a read just before the step found nothing there ({snap.status}), and the "
                "pack says the step changes nothing that is absent",
                "read",
            )
        what = "undo_absent"
    ctx = _context(facts, parse_json(snap.body) if snap.existed else None, response=True)
    method, url, headers, body, content_type = _rendered(undo, facts, ctx, what)
    out = request(method, url, body or None, content_type, headers or None)
    if undo.get("repeatable"):
        out["repeatable"] = True
    out["readback"] = _readback(read, snap, facts)
    out["target"] = readback.target_name(out["readback"])
    out["needs_after_read"] = True
    return out


def left_after(spec: dict[str, Any], absent: bool, body: bytes) -> dict[str, Any]:
    """The `after` record of a read right after the step: what it left, as digests of the
    compared fields (`left`), or that it left the target absent (`left_gone`)."""
    if absent:
        return {"exists": False, "left_gone": True}
    doc = parse_json(body)
    paths = [list(p) for p in spec.get("left_paths") or [[]]]
    return {
        "exists": True,
        "left": [readback.same_digest(p, readback.value_at(doc, p)) for p in paths],
    }
