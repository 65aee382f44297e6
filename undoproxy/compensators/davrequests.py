"""The requests WebDAV compensators are made of (pure): the reads before a step (PROPFIND,
GET), what those reads showed, and the parts of an inverse (a PUT back, a PROPPATCH, the
read-back over its targets).

A read is named (`source`, `dest_body`, `props`, ...); the snapshot addon sends it with the
agent's credentials before forwarding and hands it back in `Facts.reads` under that name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from undoproxy.compensators import davxml, targets
from undoproxy.compensators.davxml import NotDav, Resource
from undoproxy.compensators.model import Facts, Irreversible, PreRead, Snapshot, restore_headers
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


# --- reading what was read ---------------------------------------------------------------------


def read(facts: Facts, name: str) -> Snapshot:
    """The read named `name`; Irreversible when it was not made."""
    snap = facts.reads.get(name)
    if snap is None:
        raise Irreversible(f"the {name.replace('_', ' ')} was not read before the step")
    return snap


def props(facts: Facts, name: str, url: str) -> Resource | None:
    """The resource a PROPFIND read showed (None: it did not exist)."""
    snap = read(facts, name)
    if not snap.existed:
        return None
    try:
        return davxml.resource(snap.body, url)
    except NotDav as exc:
        raise Irreversible(f"the {name} read before the step is not WebDAV ({exc})") from None


def body(facts: Facts, name: str) -> Snapshot:
    """The body a GET read showed; Irreversible when the resource was gone."""
    snap = read(facts, name)
    if not snap.existed:
        raise Irreversible(f"the {name.replace('_', ' ')} was gone when read before the step")
    return snap


# --- the parts of an inverse -------------------------------------------------------------------


def readback(expect: list[Check], left: list[Check] | None = None) -> dict[str, Any]:
    """An inverse's `readback`: what its targets must show (and must no longer show)."""
    out: dict[str, Any] = {"targets": expect}
    if left:
        out["left"] = left
    return out


def put_back(url: str, snap: Snapshot) -> dict[str, Any]:
    """PUT a body read before the step back, with its representation headers."""
    kept = restore_headers(snap)
    return request(
        "PUT", url, snap.replay_body, snap.content_type or "application/octet-stream", kept or None
    )


def set_properties(url: str, dead: dict[str, str], remove: list[str]) -> dict[str, Any]:
    """PROPPATCH `url`: set the `dead` properties, remove those in `remove`."""
    patch = davxml.proppatch_body(dead, remove)
    return request("PROPPATCH", url, patch, davxml.XML_TYPE)


def body_check(facts: Facts, name: str, res: Resource) -> list[Check]:
    """A file's body must come back byte for byte (a collection's listing is not compared)."""
    if res.collection:
        return []
    return [targets.same_as(body(facts, name))]
