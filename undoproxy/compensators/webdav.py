"""WebDAV and CalDAV compensators: the inverse of what the `webdav` pack recognises (pure).

Each operation says what it must read before it is forwarded (`READS`: a PROPFIND of the
properties, a GET of a destination about to be overwritten), which the snapshot addon does with
the agent's credentials and hands back in `Facts.reads`; the builder (after a 2xx answer) returns
the inverse request, its further requests (`then`) and its read-back over every target it
touches (compensators/targets.py, with the PROPFIND checks of `differences` below), or raises
Irreversible saying why a person must act.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

from undoproxy import redact
from undoproxy.compensators import davcheck, davxml, targets
from undoproxy.compensators.davxml import NotDav, Resource
from undoproxy.compensators.model import (
    Facts,
    Irreversible,
    NothingToUndo,
    PreRead,
    Snapshot,
    origin,
)
from undoproxy.compensators.model import inverse_request as request

Check = dict[str, Any]


def propfind(name: str, url: str, depth: str = "0", props: list[str] | None = None) -> PreRead:
    """A PROPFIND of `url` (every property, or just `props`)."""
    headers = {"Depth": depth, "Content-Type": davxml.XML_TYPE}
    return PreRead(name, "PROPFIND", url, headers, davxml.propfind_body(props))


def get(name: str, url: str) -> PreRead:
    """A GET of `url`, optional (a collection's listing may be large or refused)."""
    return PreRead(name, "GET", url, optional=True)


def properties_read(url: str) -> PreRead:
    """What `recreate` reads besides its snapshot: the target's WebDAV properties. Optional: a
    server that does not speak WebDAV answers it with an error, and has none to lose."""
    return dataclasses.replace(propfind("props", url), optional=True)


# --- what each operation reads before it is forwarded ----------------------------------------


def destination(facts: Facts) -> str:
    """The Destination of a MOVE or COPY, absolute; Irreversible when it is missing or on
    another origin (the agent's credentials never go there)."""
    value = facts.request_headers.get("destination")
    if not value:
        raise Irreversible(f"the {facts.method} has no Destination header")
    url = urljoin(facts.url, value.strip())
    if origin(url) != origin(facts.url):
        raise Irreversible(
            f"the {facts.method} sends the resource to another host ({redact.url(url)}); "
            "undo it there by hand"
        )
    return url


def _dest_or_none(facts: Facts) -> str | None:
    try:
        return destination(facts)
    except Irreversible:
        return None  # the builder says why, after the answer


def move_reads(facts: Facts) -> list[PreRead]:
    """MOVE: the source (properties and members, and its body), the destination likewise."""
    dst = _dest_or_none(facts)
    if dst is None:
        return []
    return [
        propfind("source", facts.url, "1"),
        get("source_body", facts.url),
        propfind("dest", dst),
        get("dest_body", dst),
    ]


def copy_reads(facts: Facts) -> list[PreRead]:
    """COPY: the source's properties, the destination's properties and body."""
    dst = _dest_or_none(facts)
    if dst is None:
        return []
    return [propfind("source", facts.url), propfind("dest", dst), get("dest_body", dst)]


def proppatch_reads(facts: Facts) -> list[PreRead]:
    """PROPPATCH: the prior value of exactly the properties it sets or removes."""
    try:
        set_, removed = davxml.proppatch_names(facts.request_body)
    except NotDav:
        return []
    names = [*set_, *removed]
    return [propfind("props", facts.url, "0", names)] if names else []


# --- reading what was read ---------------------------------------------------------------------


def _read(facts: Facts, name: str) -> Snapshot:
    snap = facts.reads.get(name)
    if snap is None:
        raise Irreversible(f"the {name.replace('_', ' ')} was not read before the step")
    return snap


def _props(facts: Facts, name: str, url: str) -> Resource | None:
    """The resource a PROPFIND read showed (None: it did not exist)."""
    snap = _read(facts, name)
    if not snap.existed:
        return None
    try:
        return davxml.resource(snap.body, url)
    except NotDav as exc:
        raise Irreversible(f"the {name} read before the step is not WebDAV ({exc})") from None


def _body(facts: Facts, name: str) -> Snapshot:
    snap = _read(facts, name)
    if not snap.existed:
        raise Irreversible(f"the {name.replace('_', ' ')} was gone when read before the step")
    return snap


# --- the inverses ------------------------------------------------------------------------------


def _readback(expect: list[Check], left: list[Check] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"targets": expect}
    if left:
        out["left"] = left
    return out


def _put_back(url: str, snap: Snapshot) -> dict[str, Any]:
    """PUT a body read before the step back, with its representation headers."""
    kept = {k: v for k, v in snap.headers.items() if k not in ("content-type", "content-encoding")}
    return request(
        "PUT", url, snap.body, snap.content_type or "application/octet-stream", kept or None
    )


def _set_properties(url: str, dead: dict[str, str], remove: list[str]) -> dict[str, Any]:
    body = davxml.proppatch_body(dead, remove)
    return request("PROPPATCH", url, body, davxml.XML_TYPE)


def delete_collection(facts: Facts) -> dict[str, Any]:
    """MKCOL / MKCALENDAR answered 201: DELETE the collection it created. Before deleting,
    rollback checks that nothing else was put in it since (a Depth: 1 PROPFIND lists no member)."""
    if facts.response_status != 201:
        raise Irreversible(
            f"the {facts.method} answered {facts.response_status}, not 201 Created: undoproxy "
            "cannot tell that it created the collection"
        )
    empty: Check = {"url": facts.url, "propfind": {"depth": "1", "props": None}, "members": []}
    out = request("DELETE", facts.url)
    out["readback"] = _readback([targets.gone(facts.url)], [empty])
    return out


def _body_check(facts: Facts, name: str, res: Resource) -> list[Check]:
    """A file's body must come back byte for byte (a collection's listing is not compared)."""
    if res.collection:
        return []
    return [targets.same_as(_body(facts, name))]


def move_back(facts: Facts) -> dict[str, Any]:
    """MOVE the resource back (Overwrite: F); a destination the MOVE replaced is put back."""
    src, dst = facts.url, destination(facts)
    was = _props(facts, "source", src)
    if was is None:
        raise Irreversible("the source did not exist when read before the MOVE")
    replaced = _props(facts, "dest", dst)
    if replaced is not None and replaced.collection:
        raise Irreversible(
            f"the MOVE replaced the collection {redact.url(dst)}: what it held is gone and "
            "undoproxy did not read it; rebuild it by hand"
        )
    members = davxml.members(_read(facts, "source").body, src) if was.collection else None
    back = request(
        "MOVE",
        dst,
        headers={
            "Destination": src,
            "Overwrite": "F",
            "Depth": "infinity",
        },
    )
    expect = [davcheck.same_properties(src, was, members), *_body_check(facts, "source_body", was)]
    then: list[dict[str, Any]] = []
    if replaced is None:
        expect.append(targets.gone(dst))
    else:
        then.append(_put_back(dst, _body(facts, "dest_body")))
        if replaced.dead():
            then.append(_set_properties(dst, replaced.dead(), []))
        expect += [
            davcheck.same_properties(dst, replaced),
            *_body_check(facts, "dest_body", replaced),
        ]
    if then:
        back["then"] = then
    back["readback"] = _readback(expect, [targets.gone(src)])
    return back


def undo_copy(facts: Facts) -> dict[str, Any]:
    """DELETE the copy; or put back the file it replaced, body and dead properties."""
    dst = destination(facts)
    replaced = _props(facts, "dest", dst)
    if replaced is None:
        out = request("DELETE", dst)
        out["readback"] = _readback([targets.gone(dst)])
        return out
    if replaced.collection:
        raise Irreversible(
            f"the COPY replaced the collection {redact.url(dst)}: what it held is gone and "
            "undoproxy did not read it; rebuild it by hand"
        )
    body = _body(facts, "dest_body")
    source = _props(facts, "source", facts.url)
    dead = replaced.dead()
    if source is not None and source.collection:
        # A collection now stands where the file was: remove it, then put the file back.
        out = request("DELETE", dst)
        out["then"] = [_put_back(dst, body)] + ([_set_properties(dst, dead, [])] if dead else [])
    else:
        added = [n for n in (source.dead() if source else {}) if n not in dead]
        out = _put_back(dst, body)
        if dead or added:
            out["then"] = [_set_properties(dst, dead, added)]
    out["readback"] = _readback([targets.same_as(body), davcheck.same_properties(dst, replaced)])
    return out


def restore_properties(facts: Facts) -> dict[str, Any]:
    """PROPPATCH back the prior value of exactly the properties the agent set or removed."""
    try:
        set_, removed = davxml.proppatch_names(facts.request_body)
    except NotDav as exc:
        raise Irreversible(f"the PROPPATCH body cannot be read ({exc})") from None
    names = [*set_, *removed]
    if not names:
        raise NothingToUndo("the PROPPATCH names no property")
    if not davxml.changed_any(facts.response_body, names):
        raise NothingToUndo("the server answered that it changed none of the properties")
    before = _props(facts, "props", facts.url)
    if before is None:
        raise Irreversible("the target did not exist when its properties were read")
    unknown = [n for n in names if n in before.failed or n not in before.props]
    if unknown:
        raise Irreversible(
            f"the prior value of {', '.join(unknown)} could not be read before the PROPPATCH"
        )
    prior = {n: before.props[n] for n in names}
    back = _set_properties(
        facts.url,
        {n: v for n, v in prior.items() if v is not None},
        [n for n, v in prior.items() if v is None],
    )
    left = {**{n: v for n, v in set_.items()}, **{n: None for n in removed}}
    back["readback"] = _readback(
        [davcheck.values(facts.url, prior)], [davcheck.values(facts.url, left)]
    )
    return back


def unlock(facts: Facts) -> dict[str, Any]:
    """UNLOCK with the token the LOCK answered; a LOCK that created an empty resource (201)
    has it deleted too."""
    token = (facts.response_header("Lock-Token") or "").strip().strip("<>").strip()
    if not token:
        if not facts.request_body.strip():
            raise NothingToUndo("a LOCK without a body refreshes a lock; it took no new one")
        raise Irreversible("the LOCK answer has no Lock-Token, so the lock cannot be released")
    out = request("UNLOCK", facts.url, headers={"Lock-Token": f"<{token}>"})
    if facts.response_status == 201:
        out["then"] = [request("DELETE", facts.url)]
        out["readback"] = _readback([targets.gone(facts.url)])
    else:
        out["readback"] = _readback(
            [davcheck.lock(facts.url, token, held=False)],
            [davcheck.lock(facts.url, token, held=True)],
        )
    return out


def released(facts: Facts) -> dict[str, Any]:
    """An UNLOCK changed no content; a released lock cannot be taken back with its token."""
    raise NothingToUndo(
        "an UNLOCK releases a lock and changes no content; a lock cannot be taken back with "
        "its token (a lock the session took is released by undoing its LOCK)"
    )


def recreate_properties(facts: Facts, snap: Snapshot, put: dict[str, Any]) -> dict[str, Any]:
    """`recreate` on a WebDAV server: refuse a collection, and after the PUT set the dead
    properties back (read with a PROPFIND before the DELETE), verified by reading both."""
    read = facts.reads.get("props")
    if read is None or not read.existed:
        return put  # not WebDAV, or nothing was there: the body is all there is
    try:
        res = davxml.resource(read.body, snap.url)
    except NotDav:
        return put
    if res.collection:
        raise Irreversible(
            "the target is a WebDAV collection (PROPFIND says so); deleting it deleted its "
            "members, which the snapshot does not hold: rebuild it by hand"
        )
    dead = res.dead()
    if not dead:
        return put
    put["then"] = [_set_properties(snap.url, dead, [])]
    put["readback"] = _readback([targets.same_as(snap), davcheck.same_properties(snap.url, res)])
    return put


DESCRIPTIONS: dict[str, str] = {
    "webdav.delete-collection": "DELETE the collection a MKCOL or MKCALENDAR created",
    "webdav.move-back": "MOVE the resource back (Overwrite: F); a destination it replaced is "
    "put back with its dead properties",
    "webdav.undo-copy": "DELETE the copy, or put back the file it replaced with its dead "
    "properties",
    "webdav.restore-properties": "PROPPATCH back the prior value of exactly the properties set "
    "or removed",
    "webdav.unlock": "UNLOCK with the Lock-Token the LOCK answered (and DELETE the empty "
    "resource a LOCK created)",
    "webdav.released": "nothing to undo: an UNLOCK changes no content",
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "webdav.delete-collection": delete_collection,
    "webdav.move-back": move_back,
    "webdav.undo-copy": undo_copy,
    "webdav.restore-properties": restore_properties,
    "webdav.unlock": unlock,
    "webdav.released": released,
}

READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "webdav.move-back": move_reads,
    "webdav.undo-copy": copy_reads,
    "webdav.restore-properties": proppatch_reads,
}
