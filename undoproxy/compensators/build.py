"""Build the inverse request of a step: `prepare()` before forwarding, `complete()` after.

The result is the journal's compensation record, a JSON-safe dict:
    kind            restore | delete-created | recreate | template | a pack name
    method, url     the inverse request (absent while not ready)
    body_b64, content_type, headers   its body and extra (non-secret) headers
    fallback        recreate's POST to the collection, when PUT is answered 404/405
    ready           True once method and url are known
    reason          why the step is irreversible (then ready is False)
    noop            why there is nothing to undo (e.g. the DELETE target did not exist)
    snapshot_url    the target, re-read by rollback for drift checks and unknown outcomes
    after           what the agent's own write produced: {etag, sha256} (drift baseline)
    needs_after_read  True when the response told nothing about the result (a GET is due)
    check_absent    recreate: conflict if the target exists again
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from undoproxy.compensators import packs
from undoproxy.compensators.model import (
    Facts,
    Irreversible,
    NothingToUndo,
    Plan,
    content_hash,
    origin,
    parse_json,
)
from undoproxy.compensators.model import inverse_request as request
from undoproxy.rules import TemplateContext, TemplateError, render_template
from undoproxy.rules.templates import template_references_response

Compensation = dict[str, Any]


def without_query(url: str) -> str:
    """The URL without query string or fragment."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, "", ""))


def parent(url: str) -> str:
    """The collection URL of a resource URL (`/items/7` -> `/items`)."""
    p = urlsplit(url)
    path = p.path.rstrip("/").rsplit("/", 1)[0] or "/"
    return urlunsplit((p.scheme, p.netloc, path, "", ""))


def _context(facts: Facts, *, with_response: bool) -> TemplateContext:
    snapshot_json = None
    if facts.snapshot is not None:
        snapshot_json = parse_json(facts.snapshot.body)
    return TemplateContext(
        captures=facts.captures,
        request_body=facts.request_json,
        response_body=facts.response_json if with_response else None,
        response_headers=facts.response_headers if with_response else {},
        snapshot_body=snapshot_json,
    )


def _template(plan: Plan, facts: Facts, *, with_response: bool) -> dict[str, Any]:
    assert plan.template is not None
    try:
        rendered = render_template(plan.template, _context(facts, with_response=with_response))
    except TemplateError as exc:
        raise Irreversible(f"the rule's compensation template cannot be filled in: {exc}") from None
    url = urljoin(facts.url, str(rendered["url"]))
    headers = {str(k): str(v) for k, v in (rendered.get("headers") or {}).items()}
    # A Content-Type the rule gives is the one sent (form bodies, merge-patch+json, ...).
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    return request(
        str(rendered["method"]).upper(), url, rendered.get("body"), content_type, headers
    )


def _restore(facts: Facts) -> dict[str, Any]:
    snap = facts.snapshot
    if snap is None:
        raise Irreversible("no snapshot was taken, so the prior state is unknown")
    if not snap.existed:
        # The target did not exist before this write: undoing it means deleting it.
        return request("DELETE", snap.url)
    return request("PUT", snap.url, snap.body, snap.content_type or "application/json")


def _recreate(facts: Facts) -> dict[str, Any]:
    snap = facts.snapshot
    if snap is None:
        raise Irreversible("no snapshot was taken, so the deleted resource cannot be rebuilt")
    put = request("PUT", snap.url, snap.body, snap.content_type or "application/json")
    put["fallback"] = request(
        "POST", parent(snap.url), snap.body, snap.content_type or "application/json"
    )
    return put


def _delete_created(facts: Facts) -> dict[str, Any]:
    location = facts.response_header("Location")
    if location:
        url = urljoin(facts.url, location)
        if origin(url) != origin(facts.url):
            raise Irreversible(
                f"the created resource's Location {location} is on another "
                "host; delete it by hand if needed"
            )
        return request("DELETE", url)
    body = facts.response_json
    created_id = body.get("id") if isinstance(body, dict) else None
    if isinstance(created_id, str | int) and not isinstance(created_id, bool) and created_id != "":
        return request(
            "DELETE", f"{without_query(facts.url).rstrip('/')}/{quote(str(created_id), safe='')}"
        )
    raise Irreversible(
        f"the response to {facts.method} {without_query(facts.url)} names "
        "nothing it created (no Location header, no id): check by hand what "
        "it created"
    )


def _irreversible(plan: Plan, reason: str) -> Compensation:
    return {"kind": plan.kind, "ready": False, "reason": reason, "snapshot_url": plan.snapshot_url}


def prepare(plan: Plan, facts: Facts) -> Compensation:
    """What can be known before forwarding (snapshot taken, no response yet)."""
    if plan.irreversible:
        return _irreversible(plan, plan.reason or "no compensation")
    comp: Compensation = {
        "kind": plan.kind,
        "ready": False,
        "snapshot_url": plan.snapshot_url,
        "inferred": plan.inferred,
    }
    try:
        if plan.kind == "restore":
            comp.update(_restore(facts), ready=True)
        elif plan.kind == "recreate":
            if facts.snapshot is not None and not facts.snapshot.existed:
                comp["noop"] = "the target did not exist before the DELETE"
            else:
                comp.update(_recreate(facts), ready=True, check_absent=True)
        elif plan.kind == "template" and not template_references_response(plan.template):
            comp.update(_template(plan, facts, with_response=False), ready=True)
    except Irreversible as exc:
        return _irreversible(plan, str(exc))
    return comp


def complete(plan: Plan, comp: Compensation, facts: Facts) -> Compensation:
    """Fill in what needed the response; record what the agent's write produced."""
    if comp.get("reason") or comp.get("noop"):
        return comp
    status = facts.response_status or 0
    if not 200 <= status < 300:
        return {
            **comp,
            "noop": f"the request failed upstream (HTTP {status}); "
            "it is assumed to have changed nothing",
        }
    comp = dict(comp)
    try:
        if plan.kind == "delete-created":
            comp.update(_delete_created(facts), ready=True)
        elif plan.kind == "template" and not comp["ready"]:
            comp.update(_template(plan, facts, with_response=True), ready=True)
        elif plan.kind in packs.PACK_BUILDERS:
            comp.update(packs.PACK_BUILDERS[plan.kind](facts), ready=True)
    except Irreversible as exc:
        return _irreversible(plan, str(exc))
    except NothingToUndo as exc:
        return {**comp, "noop": str(exc)}
    if plan.kind == "restore":  # the drift check before restoring compares against this
        comp.update(after_image(facts))
    return comp


def after_image(facts: Facts) -> dict[str, Any]:
    """What the agent's write produced, as far as the response tells (drift baseline)."""
    etag = facts.response_header("ETag")
    body = facts.response_json
    if etag:
        return {"after": {"etag": etag}, "needs_after_read": False}
    if isinstance(body, dict) and body:
        return {"after": {"sha256": content_hash(facts.response_body)}, "needs_after_read": False}
    return {"after": None, "needs_after_read": True}
