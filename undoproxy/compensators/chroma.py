"""Chroma (vector database, REST API v2) compensators (pure).

Records are written by POSTs to `…/collections/{id}/add|upsert|update|delete` whose body
lists the ids; before one, undoproxy reads those records with everything they hold (`/get`
with embeddings, metadatas, documents, uris), and after it:

    add                    delete the ids it created
    upsert, update         upsert each record back as it was (metadata keys the agent added
                           set to null: Chroma merges metadata), delete the ids it created
    delete                 add the records back, embeddings and all (by ids, or every record
                           its `where` filter matched, up to MAX_RECORDS)
    create a collection    delete it by name (one that existed, `get_or_create`: nothing)
    modify a collection    its name and metadata put back
    create a database      delete it

Each record is read back by its own `/get`: ids, embedding, metadata, document and uri as
before (or not there). Deleting a collection is irreversible: the pack holds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from undoproxy.compensators import readback
from undoproxy.compensators.model import (
    Facts,
    Irreversible,
    NothingToUndo,
    PreRead,
    parse_json,
)
from undoproxy.compensators.model import inverse_request as request

MAX_RECORDS = 1000  # records read before one write (and put back after it)
INCLUDE = ["embeddings", "metadatas", "documents", "uris"]
COLUMNS: tuple[tuple[str, str], ...] = (
    ("embeddings", "embedding"),
    ("metadatas", "metadata"),
    ("documents", "document"),
    ("uris", "uri"),
)
JSON_HEADERS = {"Content-Type": "application/json"}


def _op(facts: Facts) -> str:
    return urlsplit(facts.url).path.rstrip("/").rsplit("/", 1)[-1]


def _sibling(facts: Facts, name: str) -> str:
    """`…/collections/{id}/NAME` beside the request's `…/collections/{id}/add`."""
    p = urlsplit(facts.url)
    return urljoin(urlunsplit((p.scheme, p.netloc, p.path.rstrip("/"), "", "")), name)


def _body(facts: Facts) -> dict[str, Any]:
    body = facts.request_json
    if not isinstance(body, dict):
        raise Irreversible("the Chroma request's body is not a JSON object")
    return body


def _ids(facts: Facts) -> list[str] | None:
    ids = _body(facts).get("ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise Irreversible("the request's ids are not a list of strings")
    if len(ids) > MAX_RECORDS:
        raise Irreversible(f"the request names {len(ids)} records; undoproxy keeps {MAX_RECORDS}")
    return list(dict.fromkeys(ids))


def _get_body(ids: list[str]) -> dict[str, Any]:
    return {"ids": ids, "include": INCLUDE}


def record_reads(facts: Facts) -> list[PreRead]:
    """The records the write names, with everything they hold (a delete by `where`: every
    record it matches, up to MAX_RECORDS)."""
    ids = _ids(facts)
    if ids is not None:
        payload: dict[str, Any] = _get_body(ids)
    elif _op(facts) == "delete":
        body = _body(facts)
        payload = {"include": INCLUDE, "limit": MAX_RECORDS + 1}
        for key in ("where", "where_document"):
            if body.get(key) is not None:
                payload[key] = body[key]
        if len(payload) == 2:
            raise Irreversible("the delete names neither ids nor a where filter")
    else:
        raise Irreversible(f"the {_op(facts)} names no ids")
    body_bytes = json.dumps(payload).encode()
    return [PreRead("records", "POST", _sibling(facts, "get"), JSON_HEADERS, body_bytes)]


def _records(facts: Facts) -> dict[str, dict[str, Any]]:
    """The records read before the step, by id: {embedding, metadata, document, uri}."""
    snap = facts.reads.get("records")
    doc = parse_json(snap.body) if snap is not None and snap.existed else None
    if not isinstance(doc, dict) or not isinstance(doc.get("ids"), list):
        raise Irreversible("the records could not be read before the step")
    ids = doc["ids"]
    if len(ids) > MAX_RECORDS:
        raise Irreversible(f"the step touches more than {MAX_RECORDS} records")
    out: dict[str, dict[str, Any]] = {}
    for n, rid in enumerate(ids):
        record = {}
        for column, field in COLUMNS:
            values = doc.get(column)
            record[field] = values[n] if isinstance(values, list) and n < len(values) else None
        out[str(rid)] = record
    return out


def _columns(ids: list[str], records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Records as the columnar body `add` and `upsert` take."""
    body: dict[str, Any] = {"ids": ids}
    for column, field in COLUMNS:
        values = [records[i][field] for i in ids]
        if field == "embedding" or any(v is not None for v in values):
            body[column] = values
    return body


def _check(facts: Facts, rid: str, record: dict[str, Any] | None) -> dict[str, Any]:
    """One record must read as `record` (None: not there)."""
    check = readback.rpc_read("POST", _sibling(facts, "get"), _get_body([rid]), JSON_HEADERS)
    if record is None:
        check["expect"] = [readback.expect(["ids"], [])]
        return check
    check["expect"] = [readback.expect(["ids"], [rid])] + [
        readback.same_digest([column, 0], record[field]) for column, field in COLUMNS
    ]
    return check


def undo_records(facts: Facts) -> dict[str, Any]:
    """add, upsert, update, delete: every record it named back as it was."""
    op = _op(facts)
    before = _records(facts)
    named = _ids(facts) if op != "delete" or _ids(facts) is not None else list(before)
    assert named is not None
    body = _body(facts)
    created = [i for i in named if i not in before]
    requests: list[dict[str, Any]] = []
    if op == "delete":
        gone = [i for i in named if i in before]
        if not gone:
            raise NothingToUndo("a read just before the delete found none of its records", "read")
        requests.append(request("POST", _sibling(facts, "add"), _columns(gone, before)))
    else:
        if op in ("upsert", "update"):
            changed = [i for i in named if i in before]
            if changed:
                agent_keys = _metadata_keys(body, named)
                back = {i: dict(before[i]) for i in changed}
                for i in changed:
                    old = back[i]["metadata"] or {}
                    extra = {k: None for k in agent_keys.get(i, ()) if k not in old}
                    if extra or old:
                        back[i]["metadata"] = {**old, **extra}
                requests.append(request("POST", _sibling(facts, "upsert"), _columns(changed, back)))
        if op != "update" and created:
            requests.append(request("POST", _sibling(facts, "delete"), {"ids": created}))
    if not requests:
        raise NothingToUndo("a read just before the step found nothing it could change", "read")
    out = dict(requests[0])
    if len(requests) > 1:
        out["then"] = requests[1:]
    out["repeatable"] = True
    targets = [_check(facts, i, before.get(i)) for i in named]
    out["readback"] = {"targets": targets}
    out["target"] = "chroma " + _sibling(facts, "") + " " + " ".join(sorted(named)[:20])
    return out


def _metadata_keys(body: dict[str, Any], ids: list[str]) -> dict[str, set[str]]:
    """The metadata keys the request writes, by id."""
    out: dict[str, set[str]] = {}
    metas = body.get("metadatas")
    if not isinstance(metas, list):
        return out
    for rid, meta in zip(body.get("ids") or [], metas, strict=False):
        if isinstance(meta, dict) and rid in ids:
            out.setdefault(str(rid), set()).update(str(k) for k in meta)
    return out


# --- collections and databases ----------------------------------------------------------------


def _named(facts: Facts, key: str = "name") -> str:
    name = _body(facts).get(key)
    if not isinstance(name, str) or not name:
        raise Irreversible(f"the request names no {key}")
    return name


def _child(facts: Facts, name: str) -> str:
    """`…/collections/NAME` beside the request's `…/collections`."""
    return facts.url.split("?", 1)[0].rstrip("/") + "/" + quote(name, safe="")


def create_reads(facts: Facts) -> list[PreRead]:
    """Creating a collection or database: whether one of that name exists already."""
    return [PreRead("existing", "GET", _child(facts, _named(facts)))]


def undo_create(facts: Facts) -> dict[str, Any]:
    """A collection or database created: DELETE it by name (read back: 404)."""
    snap = facts.reads.get("existing")
    if snap is None:
        raise Irreversible("whether it existed before could not be read")
    if snap.existed:
        raise NothingToUndo("one of that name existed before: nothing was created", "read")
    url = _child(facts, _named(facts))
    out = request("DELETE", url)
    out["readback"] = readback.gone(url)
    return out


def _by_id(facts: Facts) -> str:
    """`…/collections/by-id/{id}` for the request's `…/collections/{id}`."""
    path = urlsplit(facts.url).path.rstrip("/")
    head, _, collection = path.rpartition("/")
    p = urlsplit(facts.url)
    return urlunsplit((p.scheme, p.netloc, f"{head}/by-id/{collection}", "", ""))


def modify_reads(facts: Facts) -> list[PreRead]:
    """Modifying a collection: its name and metadata as they are."""
    return [PreRead("collection", "GET", _by_id(facts))]


def undo_modify(facts: Facts) -> dict[str, Any]:
    """The collection's name and metadata put back."""
    snap = facts.reads.get("collection")
    doc = parse_json(snap.body) if snap is not None and snap.existed else None
    if not isinstance(doc, dict):
        raise Irreversible("the collection could not be read before the change")
    body = _body(facts)
    back: dict[str, Any] = {}
    if "new_name" in body:
        back["new_name"] = doc.get("name")
    if "new_metadata" in body:
        back["new_metadata"] = doc.get("metadata") or {}
    if not back:
        raise NothingToUndo("the change names neither a new name nor new metadata", "request")
    out = request("PUT", facts.url, back)
    check = readback.readback(
        _by_id(facts),
        *[readback.expect([k], doc.get(k)) for k in ("name", "metadata") if f"new_{k}" in body],
    )
    out["readback"] = check
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "chroma.records": record_reads,
    "chroma.create": create_reads,
    "chroma.modify-collection": modify_reads,
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "chroma.records": undo_records,
    "chroma.create": undo_create,
    "chroma.modify-collection": undo_modify,
}

DESCRIPTIONS = {
    "chroma.records": "each record back as it was, embeddings, metadata and documents included "
    "(upsert back, delete the new ones, add back the deleted ones), read back record by record",
    "chroma.create": "DELETE the collection or database created, by name",
    "chroma.modify-collection": "the collection's name and metadata put back",
}
