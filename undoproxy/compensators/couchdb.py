"""CouchDB compensators: documents undone by revision, `_bulk_docs` one document at a time (pure).

Every CouchDB write names the revision it replaces (`_rev` in the body, `?rev=` in the URL)
and answers the new one (`{"ok": true, "id": ..., "rev": ...}`); a document read back carries
its `_rev`, which every write changes, so documents are compared without it. What the agent
did, and its inverse:

    PUT  /{db}/{doc}, creating      DELETE /{db}/{doc}?rev=<the rev the PUT answered>
    PUT  /{db}/{doc}, updating      PUT the prior body with `_rev` (rollback names the
                                    revision the document has at that moment, `executor._fit`)
    DELETE /{db}/{doc}              PUT the prior body without `_rev` (CouchDB takes a PUT over
                                    a deleted document as its next revision)
    POST /{db}                      as a PUT of the document it names (`id` in the answer)
    POST /{db}/_bulk_docs           one `_bulk_docs` with each document's inverse
    PUT  /{db}                      DELETE /{db}, only while it holds no documents

Each is read back: the document (or every document of a `_bulk_docs`, in one
`_all_docs?keys=...&include_docs=true`) must equal its snapshot apart from `_rev`, or be gone.
Before overwriting, rollback reads the same way that the document is still as the agent left
it (apart from `_rev`); otherwise the step is a conflict and nothing is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, Snapshot, parse_json
from undoproxy.compensators.model import inverse_request as request
from undoproxy.compensators.readback import expect, gone, readback

MAX_DOCS = 100  # a _bulk_docs with more documents is irreversible (its read-back is one GET)
# Members CouchDB adds to a read (or takes on a write) that are no part of the content.
META = frozenset({"_rev", "_revisions", "_revs_info", "_conflicts", "_deleted_conflicts"})
IGNORED = ["_rev"]  # compared without: every write changes it
# What the agent wrote is compared without these too: the server adds `_id` from the URL and
# keeps attachments sent inline as stubs.
IGNORED_WRITTEN = ["_rev", "_id", "_attachments"]


def _base(url: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "", "", ""))


def _segments(url: str) -> list[str]:
    return [s for s in urlsplit(url).path.split("/") if s]


def db_url(url: str) -> str:
    """The database a request is about: the first path segment."""
    segments = _segments(url)
    if not segments:
        raise Irreversible("the request names no database")
    return f"{_base(url)}/{segments[0]}"


def doc_url(url: str) -> str:
    """The document a request names, without its query (`?rev=` pins a revision)."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, "", ""))


def id_url(database: str, doc_id: str) -> str:
    """The URL of a document by id (`_design/x` and `_local/x` keep their slash)."""
    for prefix in ("_design/", "_local/"):
        if doc_id.startswith(prefix):
            return f"{database}/{prefix}{quote(doc_id.removeprefix(prefix), safe='')}"
    return f"{database}/{quote(doc_id, safe='')}"


def all_docs_url(database: str, ids: list[str]) -> str:
    """One GET that reads these documents as they are now (deleted and missing ones included)."""
    query = urlencode({"include_docs": "true", "keys": json.dumps(ids, separators=(",", ":"))})
    return f"{database}/_all_docs?{query}"


def same_doc(path: list[str | int], doc: Any, ignore: list[str]) -> dict[str, Any]:
    """The value at `path` must equal `doc` apart from the `ignore` members."""
    return {**expect(path, doc), "ignore": ignore}


def _answer(facts: Facts) -> dict[str, Any]:
    """CouchDB's answer to a write, `{"ok": true, "id", "rev"}`, else Irreversible."""
    body = facts.response_json
    if (
        isinstance(body, dict)
        and body.get("ok") is True
        and isinstance(body.get("id"), str)
        and isinstance(body.get("rev"), str)
    ):
        return body
    raise Irreversible(
        "the answer is not CouchDB's {ok, id, rev}, so the revision it wrote is unknown: "
        "check by hand what the request did"
    )


def _prior(snap: Snapshot | None) -> dict[str, Any] | None:
    """The document before the step (None: it did not exist, or was deleted)."""
    if snap is None:
        raise Irreversible("no snapshot was taken, so the prior document is unknown")
    if not snap.existed:
        return None
    doc = parse_json(snap.body)
    if not isinstance(doc, dict) or "_id" not in doc:
        raise Irreversible("the snapshot is not a CouchDB document")
    return doc


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    """A document as it can be written back: no revision metadata."""
    if doc.get("_attachments"):
        raise Irreversible(
            "the document has attachments, which a read holds only as stubs: they cannot be "
            "written back; restore it by hand"
        )
    return {k: v for k, v in doc.items() if k not in META}


def _written(body: Any) -> dict[str, Any]:
    """What a write stored, as a read shows it apart from `_rev`, `_id` and attachments."""
    if not isinstance(body, dict):
        raise Irreversible("the request body is not a JSON document")
    return {k: v for k, v in body.items() if k not in META}


def _delete_created(url: str, rev: str, written: dict[str, Any]) -> dict[str, Any]:
    out = request("DELETE", f"{url}?{urlencode({'rev': rev})}")
    out["readback"] = gone(url)
    out["readback"]["left"] = [same_doc([], written, IGNORED_WRITTEN)]
    return out


def _put_back(url: str, prior: dict[str, Any], rev: str, written: dict[str, Any]) -> dict[str, Any]:
    # The body names the agent's revision; rollback replaces it with the one the document has
    # when the undo is sent (after checking nobody changed the content since).
    out = request("PUT", url, {**_content(prior), "_rev": rev})
    out["readback"] = readback(url, same_doc([], prior, IGNORED))
    out["readback"]["left"] = [same_doc([], written, IGNORED_WRITTEN)]
    return out


def _recreate(url: str, prior: dict[str, Any]) -> dict[str, Any]:
    out = request("PUT", url, _content(prior))
    out["readback"] = readback(url, same_doc([], prior, IGNORED))
    out["readback"]["left_gone"] = True
    return out


def document(facts: Facts) -> dict[str, Any]:
    """A document created, updated (PUT) or deleted (DELETE) at /{db}/{doc}, undone."""
    rev = _answer(facts)["rev"]
    url = doc_url(facts.url)
    prior = _prior(facts.snapshot)
    if facts.method == "DELETE":
        if prior is None:
            raise NothingToUndo("the document did not exist before the DELETE", "read")
        return _recreate(url, prior)
    written = _written(facts.request_json)
    if written.get("_deleted") is True:  # a PUT of a tombstone is a delete
        if prior is None:
            raise NothingToUndo("the document did not exist before it was deleted", "read")
        return _recreate(url, prior)
    if prior is None:
        return _delete_created(url, rev, written)
    return _put_back(url, prior, rev, written)


def post_document(facts: Facts) -> dict[str, Any]:
    """A document POSTed to /{db}: the id and revision are in the answer."""
    answer = _answer(facts)
    url = id_url(db_url(facts.url), answer["id"])
    written = _written(facts.request_json)
    prior = _prior(facts.snapshot) if facts.snapshot is not None else None
    if prior is None:
        return _delete_created(url, answer["rev"], written)
    return _put_back(url, prior, answer["rev"], written)


def _bulk_request(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("docs"), list):
        raise Irreversible("the _bulk_docs body has no docs list")
    if body.get("new_edits") is False:
        raise Irreversible(
            "a _bulk_docs with new_edits: false writes revisions as given (replication): "
            "undoing it is not supported; check by hand"
        )
    docs: list[dict[str, Any]] = body["docs"]
    if not all(isinstance(d, dict) for d in docs):
        raise Irreversible("a _bulk_docs document is not a JSON object")
    if len(docs) > MAX_DOCS:
        raise Irreversible(f"the _bulk_docs writes more than {MAX_DOCS} documents")
    ids = [d["_id"] for d in docs if "_id" in d]
    if not all(isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
        raise Irreversible("the _bulk_docs names a document twice, or an id that is no string")
    return docs


def _bulk_database(url: str) -> str:
    """The database of a `/{db}/_bulk_docs` URL."""
    segments = _segments(url)
    if len(segments) != 2 or segments[1] != "_bulk_docs":
        raise Irreversible("the request is not /{db}/_bulk_docs")
    return db_url(url)


def bulk_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """Before a _bulk_docs: the documents it names, in one read."""
    database = _bulk_database(url)
    ids = [d["_id"] for d in _bulk_request(parse_json(body)) if "_id" in d]
    return [all_docs_url(database, ids)] if ids else []


def _rows(snap: Snapshot | None) -> dict[str, dict[str, Any] | None]:
    """id -> the document before the step (None: missing or deleted), from `_all_docs`."""
    if snap is None:
        return {}
    body = parse_json(snap.body)
    rows = body.get("rows") if isinstance(body, dict) else None
    if not snap.existed or not isinstance(rows, list):
        raise Irreversible("the snapshot of the documents is not an _all_docs answer")
    out: dict[str, dict[str, Any] | None] = {}
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("key"), str):
            doc = row.get("doc")
            out[row["key"]] = doc if isinstance(doc, dict) else None
    return out


def bulk_docs(facts: Facts) -> dict[str, Any]:
    """POST /{db}/_bulk_docs: one inverse per document the server accepted, in one _bulk_docs."""
    database = _bulk_database(facts.url)
    sent = _bulk_request(facts.request_json)
    results = facts.response_json
    if not isinstance(results, list) or len(results) != len(sent):
        raise Irreversible("the _bulk_docs answer does not list one result per document")
    before = _rows(facts.snapshot)
    inverse: list[dict[str, Any]] = []
    ids: list[str] = []
    expected: list[Any] = []
    left: list[Any] = []
    for doc, result in zip(sent, results, strict=True):
        if not isinstance(result, dict) or not isinstance(result.get("rev"), str):
            continue  # refused (a conflict): this document was not written
        doc_id, rev = str(result.get("id") or doc.get("_id")), result["rev"]
        prior = before.get(doc_id)
        written = _written(doc)
        if written.get("_deleted") is True:
            if prior is None:
                continue  # deleting what was not there changed nothing
            inverse.append(_content(prior))
            left.append(None)
        elif prior is None:
            inverse.append({"_id": doc_id, "_rev": rev, "_deleted": True})
            left.append(written)
        else:
            inverse.append({**_content(prior), "_rev": rev})
            left.append(written)
        ids.append(doc_id)
        expected.append(prior)
    if not inverse:
        raise NothingToUndo("the _bulk_docs wrote no document (every one was refused)", "answer")
    out = request("POST", f"{database}/_bulk_docs", {"docs": inverse})
    out["repeatable"] = True  # each document names its revision: a repeat only conflicts
    check = all_docs_url(database, ids)
    out["readback"] = readback(
        check, *(same_doc(["rows", i, "doc"], d, IGNORED) for i, d in enumerate(expected))
    )
    out["readback"]["left"] = [
        same_doc(["rows", i, "doc"], d, IGNORED_WRITTEN) for i, d in enumerate(left)
    ]
    return out


def revisions_url(url: str, body: Any) -> str | None:
    """For an undo sent as a `_bulk_docs`: the read that tells each document's revision now."""
    if not urlsplit(url).path.endswith("/_bulk_docs") or not isinstance(body, dict):
        return None
    docs = body.get("docs")
    ids = [d["_id"] for d in docs or [] if isinstance(d, dict) and isinstance(d.get("_id"), str)]
    if not isinstance(docs, list) or not ids:
        return None
    keys = json.dumps(ids, separators=(",", ":"))
    return f"{db_url(url)}/_all_docs?{urlencode({'keys': keys})}"


def with_revisions(body: dict[str, Any], answer: Any) -> dict[str, Any]:
    """A `_bulk_docs` undo whose documents name the revisions an `_all_docs` read answered:
    a live document its revision; a deleted one none (a write over it recreates it), unless
    the undo deletes it again."""
    rows = answer.get("rows") if isinstance(answer, dict) else None
    now: dict[str, tuple[str, bool]] = {}
    for row in rows if isinstance(rows, list) else []:
        value = row.get("value") if isinstance(row, dict) else None
        if isinstance(value, dict) and isinstance(value.get("rev"), str):
            now[str(row.get("key"))] = (value["rev"], bool(value.get("deleted")))
    docs = []
    for doc in body.get("docs") or []:
        doc = {k: v for k, v in doc.items() if k != "_rev"}
        rev, deleted = now.get(str(doc.get("_id")), (None, True))
        if rev is not None and (not deleted or doc.get("_deleted") is True):
            doc["_rev"] = rev
        docs.append(doc)
    return {**body, "docs": docs}


def create_database(facts: Facts) -> dict[str, Any]:
    """PUT /{db} created a database: DELETE it, but only while it holds no documents."""
    url = doc_url(facts.url)
    if len(_segments(url)) != 1:
        raise Irreversible("the request is not PUT /{db}")
    out = request("DELETE", url)
    out["readback"] = gone(url)
    # Documents in it that the session's own undo did not remove are someone else's.
    out["readback"]["left"] = [expect(["doc_count"], 0)]
    return out


def document_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """Before a document write: the document itself (never a pinned revision of it)."""
    return [doc_url(url)]


def post_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """Before a POST /{db}: the document it names, if it names one (`_id`)."""
    doc = parse_json(body)
    doc_id = doc.get("_id") if isinstance(doc, dict) else None
    return [id_url(db_url(url), doc_id)] if isinstance(doc_id, str) and doc_id else []


def database_snapshots(method: str, url: str, body: bytes) -> list[str]:
    """Nothing to read before creating a database: a 201 says it did not exist."""
    return []


BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "couchdb.document": document,
    "couchdb.post-document": post_document,
    "couchdb.bulk-docs": bulk_docs,
    "couchdb.create-database": create_database,
}

SNAPSHOTS: dict[str, Callable[[str, str, bytes], list[str]]] = {
    "couchdb.document": document_snapshots,
    "couchdb.post-document": post_snapshots,
    "couchdb.bulk-docs": bulk_snapshots,
    "couchdb.create-database": database_snapshots,
}

DESCRIPTIONS = {
    "couchdb.document": "DELETE a created document (its rev), PUT back an updated or deleted one",
    "couchdb.post-document": "DELETE the document a POST /{db} created (id and rev answered)",
    "couchdb.bulk-docs": "one _bulk_docs with the inverse of each document written",
    "couchdb.create-database": "DELETE the created database while it holds no documents",
}
