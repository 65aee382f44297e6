"""WebDAV and CalDAV compensators: the inverse of what the `webdav` pack recognises (pure).

Each operation says what it must read before it is forwarded (`READS`: a PROPFIND of the
properties, a GET of a destination about to be overwritten), which the snapshot addon does with
the agent's credentials and hands back in `Facts.reads`; the builder (after a 2xx answer) returns
the inverse request, its further requests (`then`) and its read-back over every target it
touches (compensators/targets.py, with the PROPFIND checks of davcheck.py), or raises
Irreversible saying why a person must act.

Here: collections (MKCOL, MKCALENDAR, and `recreate` of a deleted resource's properties),
properties (PROPPATCH) and locks (LOCK, UNLOCK); MOVE and COPY are in davmove.py, the reads and
request parts they all share in davrequests.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from undoproxy.compensators import davcheck, davmove, davxml, targets
from undoproxy.compensators.davrequests import Check, propfind, props, readback, set_properties
from undoproxy.compensators.davxml import NotDav
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, PreRead, Snapshot
from undoproxy.compensators.model import inverse_request as request

# --- collections -------------------------------------------------------------------------------


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
    out["readback"] = readback([targets.gone(facts.url)], [empty])
    return out


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
    put["then"] = [set_properties(snap.url, dead, [])]
    put["readback"] = readback([targets.same_as(snap), davcheck.same_properties(snap.url, res)])
    return put


# --- properties --------------------------------------------------------------------------------


def proppatch_reads(facts: Facts) -> list[PreRead]:
    """PROPPATCH: the prior value of exactly the properties it sets or removes."""
    try:
        set_, removed = davxml.proppatch_names(facts.request_body)
    except NotDav:
        return []
    names = [*set_, *removed]
    return [propfind("props", facts.url, "0", names)] if names else []


def restore_properties(facts: Facts) -> dict[str, Any]:
    """PROPPATCH back the prior value of exactly the properties the agent set or removed."""
    try:
        set_, removed = davxml.proppatch_names(facts.request_body)
    except NotDav as exc:
        raise Irreversible(f"the PROPPATCH body cannot be read ({exc})") from None
    names = [*set_, *removed]
    if not names:
        raise NothingToUndo("the PROPPATCH names no property", "request")
    if not davxml.changed_any(facts.response_body, names):
        raise NothingToUndo("the server answered that it changed none of the properties", "answer")
    before = props(facts, "props", facts.url)
    if before is None:
        raise Irreversible("the target did not exist when its properties were read")
    unknown = [n for n in names if n in before.failed or n not in before.props]
    if unknown:
        raise Irreversible(
            f"the prior value of {', '.join(unknown)} could not be read before the PROPPATCH"
        )
    prior = {n: before.props[n] for n in names}
    back = set_properties(
        facts.url,
        {n: v for n, v in prior.items() if v is not None},
        [n for n, v in prior.items() if v is None],
    )
    left = {**{n: v for n, v in set_.items()}, **{n: None for n in removed}}
    back["readback"] = readback(
        [davcheck.values(facts.url, prior)], [davcheck.values(facts.url, left)]
    )
    return back


# --- locks -------------------------------------------------------------------------------------


def unlock(facts: Facts) -> dict[str, Any]:
    """UNLOCK with the token the LOCK answered; a LOCK that created an empty resource (201)
    has it deleted too."""
    token = (facts.response_header("Lock-Token") or "").strip().strip("<>").strip()
    if not token:
        if not facts.request_body.strip():
            raise NothingToUndo(
                "a LOCK without a body refreshes a lock; it took no new one", "request"
            )
        raise Irreversible("the LOCK answer has no Lock-Token, so the lock cannot be released")
    out = request("UNLOCK", facts.url, headers={"Lock-Token": f"<{token}>"})
    if facts.response_status == 201:
        out["then"] = [request("DELETE", facts.url)]
        out["readback"] = readback([targets.gone(facts.url)])
    else:
        out["readback"] = readback(
            [davcheck.lock(facts.url, token, held=False)],
            [davcheck.lock(facts.url, token, held=True)],
        )
    return out


def released(facts: Facts) -> dict[str, Any]:
    """An UNLOCK changed no content; a released lock cannot be taken back with its token."""
    raise NothingToUndo(
        "an UNLOCK releases a lock and changes no content; a lock cannot be taken back with "
        "its token (a lock the session took is released by undoing its LOCK)",
        "request",
    )


# --- what the pack's compensate: names build and read ------------------------------------------

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
    "webdav.move-back": davmove.move_back,
    "webdav.undo-copy": davmove.undo_copy,
    "webdav.restore-properties": restore_properties,
    "webdav.unlock": unlock,
    "webdav.released": released,
}

READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "webdav.move-back": davmove.move_reads,
    "webdav.undo-copy": davmove.copy_reads,
    "webdav.restore-properties": proppatch_reads,
}
