"""WebDAV MOVE and COPY compensators (pure): read both ends before the step, then move the
resource back or remove the copy, putting back whatever the step replaced at the destination.

The Destination must be on the request's own origin: the reads before the step and the inverse
carry the agent's credentials, which never go to another host.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

from undoproxy import redact
from undoproxy.compensators import davcheck, davxml, targets
from undoproxy.compensators.davrequests import (
    body,
    body_check,
    get,
    propfind,
    props,
    put_back,
    read,
    readback,
    set_properties,
)
from undoproxy.compensators.model import Facts, Irreversible, PreRead, origin
from undoproxy.compensators.model import inverse_request as request


def destination(facts: Facts) -> str:
    """The Destination of a MOVE or COPY, absolute; Irreversible when it is missing or on
    another origin (the agent's credentials never go there)."""
    value = facts.request_headers.get("destination")
    if not value:
        raise Irreversible(f"the {facts.method} has no Destination header")
    url = urljoin(facts.url, value.strip())
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise Irreversible(f"the {facts.method}'s Destination carries credentials (user:password@)")
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


def move_back(facts: Facts) -> dict[str, Any]:
    """MOVE the resource back (Overwrite: F); a destination the MOVE replaced is put back."""
    src, dst = facts.url, destination(facts)
    was = props(facts, "source", src)
    if was is None:
        raise Irreversible("the source did not exist when read before the MOVE")
    replaced = props(facts, "dest", dst)
    if replaced is not None and replaced.collection:
        raise Irreversible(
            f"the MOVE replaced the collection {redact.url(dst)}: what it held is gone and "
            "undoproxy did not read it; rebuild it by hand"
        )
    members = davxml.members(read(facts, "source").body, src) if was.collection else None
    back = request(
        "MOVE",
        dst,
        headers={
            "Destination": src,
            "Overwrite": "F",
            "Depth": "infinity",
        },
    )
    expect = [davcheck.same_properties(src, was, members), *body_check(facts, "source_body", was)]
    then: list[dict[str, Any]] = []
    if replaced is None:
        expect.append(targets.gone(dst))
    else:
        then.append(put_back(dst, body(facts, "dest_body")))
        if replaced.dead():
            then.append(set_properties(dst, replaced.dead(), []))
        expect += [
            davcheck.same_properties(dst, replaced),
            *body_check(facts, "dest_body", replaced),
        ]
    if then:
        back["then"] = then
    back["readback"] = readback(expect, [targets.gone(src)])
    return back


def undo_copy(facts: Facts) -> dict[str, Any]:
    """DELETE the copy; or put back the file it replaced, body and dead properties."""
    dst = destination(facts)
    replaced = props(facts, "dest", dst)
    if replaced is None:
        out = request("DELETE", dst)
        out["readback"] = readback([targets.gone(dst)])
        return out
    if replaced.collection:
        raise Irreversible(
            f"the COPY replaced the collection {redact.url(dst)}: what it held is gone and "
            "undoproxy did not read it; rebuild it by hand"
        )
    was = body(facts, "dest_body")
    source = props(facts, "source", facts.url)
    dead = replaced.dead()
    if source is not None and source.collection:
        # A collection now stands where the file was: remove it, then put the file back.
        out = request("DELETE", dst)
        out["then"] = [put_back(dst, was)] + ([set_properties(dst, dead, [])] if dead else [])
    else:
        added = [n for n in (source.dead() if source else {}) if n not in dead]
        out = put_back(dst, was)
        if dead or added:
            out["then"] = [set_properties(dst, dead, added)]
    out["readback"] = readback([targets.same_as(was), davcheck.same_properties(dst, replaced)])
    return out
