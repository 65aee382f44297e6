"""The couchdb pack without a server: which requests it takes on any host and on the hosts a
user names (`host_rules:`), and what its compensators refuse to guess. The undo of each
operation against a real server is in tests/rollback/test_couchdb.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.compensators.helpers import as_bytes, run, snapshot, step
from undoproxy.compensators import readback
from undoproxy.packs.loading import load_builtin
from undoproxy.rules import RequestView

DB = "https://couch.example.test/shop"
REV = "2-7051cbe5c8faecd085a3fa619e6e6337"


def first_match(
    method: str,
    url: str,
    body: Any = b"",
    hosts: tuple[str, ...] | None = None,
    headers: dict[str, str] | None = None,
) -> str | None:
    """The name of the couchdb rule a request matches first, or None."""
    view = RequestView.from_parts(method, url, headers or {}, as_bytes(body))
    for rule in load_builtin("couchdb", hosts).rules:
        if rule.matches(view) is not None:
            return rule.name
    return None


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("method", "url", "body", "headers", "anywhere", "named"),
    [
        ("POST", f"{DB}/_bulk_docs", {"docs": []}, JSON, "bulk-docs", "bulk-docs"),
        ("PUT", f"{DB}/order-7", {"_rev": REV, "a": 1}, JSON, "update-document", "update-document"),
        (
            "PUT",
            f"{DB}/order-7?rev={REV}",
            {"a": 1},
            JSON,
            "update-document-at-rev",
            "update-document-at-rev",
        ),
        ("DELETE", f"{DB}/order-7?rev={REV}", b"", {}, "delete-document", "delete-document"),
        ("POST", f"{DB}/_find", {"selector": {}}, JSON, "query-find", "query-find"),
        # What any REST API could send: only on the hosts the user gives.
        ("PUT", f"{DB}/order-7", {"a": 1}, JSON, None, "write-document"),
        ("POST", DB, {"a": 1}, JSON, None, "post-document"),
        ("PUT", DB, b"", {}, None, "create-database"),
        ("DELETE", DB, b"", {}, None, "delete-database"),
        ("PUT", f"{DB}/_security", {"members": {}}, JSON, None, "database-endpoint-write"),
        ("POST", "https://couch.example.test/_replicate", {}, JSON, None, "server-write"),
        ("POST", "https://couch.example.test/_session", {}, JSON, None, "login"),
        ("PUT", f"{DB}/_local/cp", {"a": 1}, JSON, None, "other-write"),
        # Another API pinning a version of a file with ?rev= is not a CouchDB document.
        (
            "PUT",
            f"{DB}/report.txt?rev=1-abc",
            b"text",
            {"Content-Type": "text/plain"},
            None,
            "write-document",
        ),
    ],
)
def test_what_the_pack_takes_on_any_host_and_on_named_hosts(
    method: str,
    url: str,
    body: Any,
    headers: dict[str, str],
    anywhere: str | None,
    named: str,
) -> None:
    got = first_match(method, url, body, headers=headers)
    assert got == (f"couchdb/{anywhere}" if anywhere else None)
    assert first_match(method, url, body, ("couch.example.test",), headers) == f"couchdb/{named}"
    assert first_match(method, url, body, ("elsewhere.test",), headers) is None


RULE = "match: {method: [PUT, DELETE, POST]}\ncompensate: couchdb.document"


def test_an_answer_that_is_not_couchdbs_is_irreversible_never_guessed() -> None:
    p, f = step(RULE, "PUT", f"{DB}/order-7?rev={REV}", {"a": 2})
    f.snapshot = snapshot(f"{DB}/order-7", body={"_id": "order-7", "_rev": REV, "a": 1})
    comp = run(p, f, 200, {"version": 3})
    assert comp["ready"] is False
    assert "not CouchDB's {ok, id, rev}" in comp["reason"]


def test_a_document_with_attachments_is_irreversible() -> None:
    p, f = step(RULE, "DELETE", f"{DB}/order-7?rev={REV}")
    stub = {"a.pdf": {"stub": True, "digest": "md5-x", "length": 3}}
    f.snapshot = snapshot(
        f"{DB}/order-7", body={"_id": "order-7", "_rev": REV, "_attachments": stub}
    )
    comp = run(p, f, 200, {"ok": True, "id": "order-7", "rev": "3-x"})
    assert comp["ready"] is False and "attachments" in comp["reason"]


def test_bulk_docs_with_new_edits_false_is_irreversible_before_forwarding() -> None:
    body = {"docs": [{"_id": "a", "_rev": "1-x"}], "new_edits": False}
    p, _ = step(
        "match: {method: POST}\ncompensate: couchdb.bulk-docs", "POST", f"{DB}/_bulk_docs", body
    )
    assert p.irreversible and "new_edits" in (p.reason or "")


def test_a_read_back_compares_documents_without_rev_and_names_fields() -> None:
    was = {"_id": "a", "_rev": "1-x", "status": "new", "items": 2}
    check = {**readback.expect([], was), "ignore": ["_rev"]}
    assert readback.differences([check], {**was, "_rev": "3-y"}) == []
    diffs = readback.differences([check], {**was, "_rev": "3-y", "status": "shipped"})
    assert diffs == ["the document (status) is not as before"]
