"""Build the inverse request of a step: `prepare()` before forwarding, `complete()` after.

The result is the journal's compensation record, a JSON-safe dict (`record.py` reads it into
typed fields for rollback):
    kind            restore | delete-created | recreate | template | rpc | a pack name
    method, url     the inverse request (absent while not ready)
    body_b64, content_type, headers   its body and extra (non-secret) headers
    fallback        recreate's POST to the collection, when PUT is answered 404/405
    ready           True once method and url are known
    reason          why the step is irreversible (then ready is False)
    noop            why there is nothing to undo (e.g. the DELETE target did not exist), with
    noop_evidence   what shows it: {kind, detail} (`record.NOTHING_EVIDENCE`); a step the
                    upstream answered with an error gets none: rollback decides it by a read
    snapshot_url    the target, re-read by rollback for drift checks and unknown outcomes
    after           what the agent's own write produced: {etag, sha256} (drift baseline)
    needs_after_read  True when the response told nothing about the result (a GET is due)
    check_absent    recreate: conflict if the target exists again
    inferred        chosen by `defaults.compensate: auto`, not by a rule (rollback confirms
                    an inferred `delete-created` target exists before deleting it)
    located         where a delete-created's URL came from: location (a 201's Location) | id
    after           what the agent's write left: {etag} from its answer, else what a read
                    right after it showed: {etag | sha256 (+ body_b64 when small JSON), exists}
    rollback        what rollback did with it so far (see `undoproxy.rollback.report.Attempts`)
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from undoproxy import redact
from undoproxy.compensators import email, packs, rpc, webdav
from undoproxy.compensators.model import (
    Facts,
    Irreversible,
    NothingToUndo,
    Plan,
    Snapshot,
    origin,
    parse_json,
    restore_headers,
)
from undoproxy.compensators.model import inverse_request as request
from undoproxy.compensators.record import nothing
from undoproxy.rules import TemplateContext, TemplateError, render_template, render_url
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
        request_body=facts.request_fields,
        response_body=facts.response_json if with_response else None,
        response_headers=facts.response_headers if with_response else {},
        snapshot_body=snapshot_json,
    )


def _template(plan: Plan, facts: Facts, *, with_response: bool) -> dict[str, Any]:
    assert plan.template is not None
    ctx = _context(facts, with_response=with_response)
    try:
        rendered = render_template(plan.template, ctx)
        # The URL again, as a URL: each value filled in is one percent-encoded path segment.
        rendered["url"] = render_url(str(plan.template["url"]), ctx)
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


# Directory listings as web and WebDAV servers render a collection: never a file to PUT back.
_LISTING = re.compile(rb"<title>[^<]{0,80}?(index of|directory listing)", re.IGNORECASE)


def collection_reason(snap: Snapshot) -> str | None:
    """Why the snapshot looks like a collection (a listing or a database), or None.

    Such a snapshot is a view of many resources, not one representation: PUTting it back would
    write the listing as a new file or make an empty database, and call that restored.
    """
    media = (snap.content_type or "").split(";", 1)[0].strip().lower()
    if media == "httpd/unix-directory":
        return "the snapshot is a directory (httpd/unix-directory)"
    if media == "text/html" and _LISTING.search(snap.body[:4096]):
        return "the snapshot is a directory listing"
    body = parse_json(snap.body)
    if urlsplit(snap.url).path.endswith("/") and not isinstance(body, dict):
        # WebDAV collections end with /; APIs that end every URL with / answer an object.
        return "the target is a collection (its URL ends with / and it reads as no object)"
    if isinstance(body, dict) and "db_name" in body and "doc_count" in body:
        return "the snapshot describes a database (db_name, doc_count), not its documents"
    return None


def _put_back(url: str, snap: Snapshot) -> dict[str, Any]:
    return request(
        "PUT",
        url,
        snap.replay_body,
        snap.content_type or "application/json",
        restore_headers(snap) or None,
    )


def _restore(facts: Facts) -> dict[str, Any]:
    snap = facts.snapshot
    if snap is None:
        raise Irreversible("no snapshot was taken, so the prior state is unknown")
    if not snap.existed:
        # The target did not exist before this write: undoing it means deleting it.
        return request("DELETE", snap.url)
    why = collection_reason(snap)
    if why:
        raise Irreversible(f"{why}; it cannot be restored by writing the snapshot back")
    return _put_back(snap.url, snap)


def _recreate(facts: Facts) -> dict[str, Any]:
    snap = facts.snapshot
    if snap is None:
        raise Irreversible("no snapshot was taken, so the deleted resource cannot be rebuilt")
    why = collection_reason(snap)
    if why:
        raise Irreversible(
            f"{why}; deleting it deleted what it contained, which the snapshot does not hold: "
            "rebuild it by hand"
        )
    put = webdav.recreate_properties(facts, snap, _put_back(snap.url, snap))
    put["fallback"] = request(
        "POST", parent(snap.url), snap.replay_body, snap.content_type or "application/json"
    )
    return put


def _is_json_rpc(value: Any) -> bool:
    return isinstance(value, dict) and "jsonrpc" in value


# Dot segments, backslashes, blanks and control characters: left to urljoin.
_UNUSUAL = re.compile(r"/\.|[\\\x00-\x20\x7f]")


def _join(base: str, reference: str) -> str:
    """urljoin, with a fast path for the usual `Location: /items/7` (an absolute path)."""
    if reference[:1] == "/" and reference[:2] != "//" and not _UNUSUAL.search(reference):
        scheme, sep, rest = base.partition("://")
        if sep:
            authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
            return f"{scheme}://{authority}{reference}"
    return urljoin(base, reference)


def _created_location(facts: Facts, location: str) -> str:
    """The URL a `Location` names, refused when deleting it could delete something else."""
    segments = urlsplit(location).path.split("/")
    if any(s in (".", "..") for s in segments):
        raise Irreversible(
            f"the created resource's Location {redact.url(location)} has dot segments; "
            "delete it by hand if needed"
        )
    url = _join(facts.url, location)
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise Irreversible(
            "the created resource's Location carries credentials (user:password@); "
            "delete it by hand if needed"
        )
    if origin(url) != origin(facts.url):
        raise Irreversible(
            f"the created resource's Location {redact.url(location)} is on another "
            "host; delete it by hand if needed"
        )
    own = urlsplit(facts.url).path.rstrip("/") + "/"
    if own.startswith(parts.path.rstrip("/") + "/"):
        raise Irreversible(
            f"the created resource's Location {redact.url(location)} names the request's own "
            "URL or a parent of it; deleting that would delete more than the POST created"
        )
    return url


def created_id_problem(created_id: str) -> str | None:
    """Why an id from a response cannot name a created resource safely, or None."""
    if created_id in (".", ".."):
        return f"the response's id {created_id!r} is not a resource name"
    if "/" in created_id:
        return f"the response's id {created_id!r} contains '/' and would name another path"
    return None


def _created_id(body: Any) -> Any:
    """The id an answer gives what it created: `id`, or `data.id` (JSON:API, Kinto)."""
    if not isinstance(body, dict):
        return None
    if "id" in body:
        return body["id"]
    data = body.get("data")
    return data.get("id") if isinstance(data, dict) else None


def _delete_created(facts: Facts) -> dict[str, Any]:
    body = facts.response_json
    if _is_json_rpc(body) or _is_json_rpc(facts.request_json):
        # A JSON-RPC answer's id is the request's id, never something the call created.
        raise Irreversible(
            f"{facts.method} {redact.url(without_query(facts.url))} is a JSON-RPC call: its "
            "answer's id echoes the request, it does not name a created resource; check by "
            "hand what the call did"
        )
    location = facts.response_header("Location")
    if location:
        out = request("DELETE", _created_location(facts, location))
        # RFC 9110: a 201's Location identifies the resource the request created.
        out["located"] = "location" if facts.response_status == 201 else "id"
        return out
    created_id = _created_id(body)
    if isinstance(created_id, str | int) and not isinstance(created_id, bool) and created_id != "":
        problem = created_id_problem(str(created_id))
        if problem:
            raise Irreversible(f"{problem}; check by hand what the POST created")
        out = request(
            "DELETE", f"{without_query(facts.url).rstrip('/')}/{quote(str(created_id), safe='')}"
        )
        out["located"] = "id"  # a guess: rollback reads it before it deletes anything
        return out
    raise Irreversible(
        f"the response to {facts.method} {redact.url(without_query(facts.url))} names "
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
                # Held against the DELETE's own answer once it comes (`complete`).
                comp.update(
                    nothing(
                        "the target did not exist before the DELETE",
                        "read",
                        f"GET {redact.url(facts.snapshot.url)} answered "
                        f"{facts.snapshot.status} just before it",
                    )
                )
            else:
                comp.update(_recreate(facts), ready=True, check_absent=True)
        elif plan.kind == "template" and not template_references_response(plan.template):
            comp.update(_template(plan, facts, with_response=False), ready=True)
    except Irreversible as exc:
        return _irreversible(plan, str(exc))
    return comp


def complete(plan: Plan, comp: Compensation, facts: Facts) -> Compensation:
    """Fill in what needed the response; record what the agent's write produced."""
    status = facts.response_status or 0
    if plan.correction is not None and 200 <= status < 300:
        # The email went out: what rollback will send its recipients (email pack).
        blocked = plan.correction_blocked
        correction = (
            {"problem": blocked, "subject": plan.correction["subject"]}
            if blocked
            else email.correction(facts, plan.correction)
        )
        comp = {**comp, "correction": correction}
    if comp.get("reason"):
        return comp
    if comp.get("noop"):
        return _held_against_answer(plan, comp, facts)
    if not 200 <= status < 300:
        # An error answer is no evidence that nothing changed (a PUT answered 502 may have
        # landed): what was prepared from the snapshot stays, and rollback decides by a read.
        return _from_before(plan, comp, facts)
    comp = dict(comp)
    try:
        if plan.kind == "delete-created":
            comp.update(_delete_created(facts), ready=True)
        elif plan.kind == "template" and not comp["ready"]:
            comp.update(_template(plan, facts, with_response=True), ready=True)
        elif plan.kind == "rpc" and plan.template is not None:
            comp.update(rpc.build(plan.template, facts), ready=True)
        elif plan.kind in packs.PACK_BUILDERS:
            comp.update(packs.PACK_BUILDERS[plan.kind](facts), ready=True)
    except Irreversible as exc:
        return _irreversible(plan, str(exc))
    except NothingToUndo as exc:
        return {**comp, **nothing(str(exc), exc.kind)}
    if plan.kind == "restore":  # the drift check before restoring compares against this
        comp.update(after_image(facts))
    return comp


def _from_before(plan: Plan, comp: Compensation, facts: Facts) -> Compensation:
    """After an error answer: a pack undo built from the reads before the step alone
    (`packs.FROM_BEFORE`), so that rollback's read-back tells whether the step changed
    anything; else the record as it was."""
    if plan.kind not in packs.FROM_BEFORE:
        return comp
    try:
        if plan.kind == "rpc" and plan.template is not None:
            built = rpc.build(plan.template, facts)
        else:
            built = packs.PACK_BUILDERS[plan.kind](facts)
    except Irreversible:
        return comp
    except NothingToUndo as exc:  # only a read before the step is evidence here
        return {**comp, **nothing(str(exc), exc.kind)} if exc.kind == "read" else comp
    return {**comp, **built, "ready": True}


def _held_against_answer(plan: Plan, comp: Compensation, facts: Facts) -> Compensation:
    """A "nothing to undo" decided before forwarding (the DELETE's target did not exist), held
    against the answer: a DELETE that reports success on a URL that read as absent may have
    deleted something the read cannot see (an API whose GET and DELETE address a resource
    differently), which cannot be rebuilt."""
    status = facts.response_status or 0
    if plan.kind == "recreate" and 200 <= status < 300:
        return _irreversible(
            plan,
            f"a GET of the target just before the DELETE answered "
            f"{facts.snapshot.status if facts.snapshot else 404}, yet the DELETE answered "
            f"{status}: if it deleted something, undoproxy cannot read what, so it cannot "
            "rebuild it; check by hand",
        )
    return comp


def after_image(facts: Facts) -> dict[str, Any]:
    """What the agent's write produced, as far as the answer shows it: its ETag. Without one
    a read right after the write is due (`needs_after_read`): an answer's body is not always
    the target's representation (`{"ok": true}`), so it is never taken for one. A write to a
    target that read as absent before, answered 200/204 rather than 201 (RFC 9110: an update,
    not a creation), needs that read too: it shows whether the URL undoproxy reads is where
    the write went."""
    etag = facts.response_header("ETag")
    created_here = facts.snapshot is not None and not facts.snapshot.existed
    if etag and not (created_here and facts.response_status != 201):
        return {"after": {"etag": etag}, "needs_after_read": False}
    return {"after": None, "needs_after_read": True}
