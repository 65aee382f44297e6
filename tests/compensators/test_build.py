"""prepare() and complete(): the inverse request each compensation builds, and why not."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.compensators.build import complete, prepare
from undoproxy.compensators.model import Plan, Snapshot

from .helpers import API, facts, respond, run, sent, sent_json, snapshot, step

CONTACT = f"{API}/contacts/7"
# A snapshot body with its own formatting and key order: restore must put back these bytes.
PRIOR = b'{ "name": "Ada",\n  "email": "ada@example.test", "id": 7 }'


# --- restore ------------------------------------------------------------------------------

RESTORE: list[Any] = [
    pytest.param(
        snapshot(CONTACT, body=PRIOR, content_type="application/json; charset=utf-8"),
        {
            "method": "PUT",
            "url": CONTACT,
            "body": PRIOR,
            "content_type": "application/json; charset=utf-8",
        },
        id="json-exact-bytes",
    ),
    pytest.param(
        snapshot(CONTACT, body=b"name,email\nAda,ada@example.test\n", content_type="text/csv"),
        {
            "method": "PUT",
            "url": CONTACT,
            "body": b"name,email\nAda,ada@example.test\n",
            "content_type": "text/csv",
        },
        id="not-json",
    ),
    pytest.param(
        snapshot(CONTACT, body=b"\x89PNG\r\n\x1a\n\x00\xff", content_type="image/png"),
        {
            "method": "PUT",
            "url": CONTACT,
            "body": b"\x89PNG\r\n\x1a\n\x00\xff",
            "content_type": "image/png",
        },
        id="binary",
    ),
    pytest.param(
        snapshot(CONTACT, body=PRIOR, content_type=None),
        {"method": "PUT", "url": CONTACT, "body": PRIOR, "content_type": "application/json"},
        id="no-content-type-means-json",
    ),
    pytest.param(
        snapshot(CONTACT, status=404),
        {"method": "DELETE", "url": CONTACT, "body": None, "content_type": None},
        id="did-not-exist-404",
    ),
    pytest.param(
        snapshot(CONTACT, status=410),
        {"method": "DELETE", "url": CONTACT, "body": None, "content_type": None},
        id="did-not-exist-410",
    ),
]


@pytest.mark.parametrize(("snap", "inverse"), RESTORE)
def test_restore_puts_the_snapshot_back(snap: Snapshot, inverse: dict[str, Any]) -> None:
    comp = prepare(Plan("restore", snapshot_url=CONTACT), facts("PUT", CONTACT, snap=snap))
    assert comp["ready"] is True
    assert sent(comp) == inverse
    assert comp["snapshot_url"] == CONTACT


def test_restore_without_a_snapshot_is_irreversible() -> None:
    comp = prepare(Plan("restore", snapshot_url=CONTACT), facts("PUT", CONTACT))
    assert comp["ready"] is False
    assert comp["reason"] == "no snapshot was taken, so the prior state is unknown"


def test_restore_goes_to_the_rules_snapshot_url_not_the_request_url() -> None:
    p, f = step(
        """
        match: {host: crm.example.test, method: [PUT, PATCH], path: "/contacts/{id}/email"}
        snapshot: {url: "/contacts/{id}"}
        compensate: restore
        """,
        "PATCH",
        f"{CONTACT}/email",
        {"email": "new@example.test"},
        snap=snapshot(CONTACT, body=PRIOR),
    )
    assert p.snapshot_url == CONTACT
    comp = run(p, f, 200, {"id": 7, "email": "new@example.test"})
    assert sent(comp) == {
        "method": "PUT",
        "url": CONTACT,
        "body": PRIOR,
        "content_type": "application/json",
    }


# --- recreate -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "collection"),
    [
        pytest.param(CONTACT, f"{API}/contacts", id="plain"),
        pytest.param(f"{CONTACT}/", f"{API}/contacts", id="trailing-slash"),
        pytest.param(f"{CONTACT}?hard=true", f"{API}/contacts", id="query-dropped-for-post"),
        pytest.param(
            "http://127.0.0.1:8443/v1/orgs/acme/contacts/7",
            "http://127.0.0.1:8443/v1/orgs/acme/contacts",
            id="nested-with-port",
        ),
    ],
)
def test_recreate_puts_back_else_posts_to_the_collection(url: str, collection: str) -> None:
    snap = snapshot(url, body=PRIOR, content_type="application/json; charset=utf-8")
    comp = prepare(Plan("recreate", snapshot_url=url), facts("DELETE", url, snap=snap))
    assert comp["ready"] is True
    assert sent(comp) == {
        "method": "PUT",
        "url": url,
        "body": PRIOR,
        "content_type": "application/json; charset=utf-8",
    }
    assert sent(comp["fallback"]) == {
        "method": "POST",
        "url": collection,
        "body": PRIOR,
        "content_type": "application/json; charset=utf-8",
    }
    # Rollback checks the target is still gone before recreating it (else: conflict).
    assert comp["check_absent"] is True


@pytest.mark.parametrize("kind", ["restore", "recreate"])
def test_the_representation_headers_go_back_with_the_body(kind: str) -> None:
    snap = Snapshot(
        CONTACT,
        200,
        b"figures",
        content_type="text/plain",
        headers={
            "content-type": "text/plain",
            "content-language": "en",
            "cache-control": "max-age=60",
            # the body was kept as stored, gzip bytes and all: its coding goes back with it
            "content-encoding": "gzip",
            "x-amz-meta-owner": "ada",
        },
    )
    method = "PUT" if kind == "restore" else "DELETE"
    comp = prepare(Plan(kind, snapshot_url=CONTACT), facts(method, CONTACT, snap=snap))
    assert sent(comp) == {
        "method": "PUT",
        "url": CONTACT,
        "body": b"figures",
        "content_type": "text/plain",
        "headers": {
            "content-encoding": "gzip",
            "content-language": "en",
            "cache-control": "max-age=60",
            "x-amz-meta-owner": "ada",
        },
    }


LISTING = b"<html><head><title>Index of /dav/docs/</title></head><body>...</body></html>"
COLLECTIONS: list[Any] = [
    pytest.param(
        Snapshot(f"{API}/dav/docs/", 200, LISTING, content_type="text/html; charset=utf-8"),
        "the snapshot is a directory listing",
        id="html-listing",
    ),
    pytest.param(
        Snapshot(f"{API}/dav/docs", 200, b"", content_type="httpd/unix-directory"),
        "the snapshot is a directory (httpd/unix-directory)",
        id="unix-directory",
    ),
    pytest.param(
        Snapshot(f"{API}/dav/docs/", 200, b"", content_type="text/plain"),
        "the target is a collection (its URL ends with / and it reads as no object)",
        id="trailing-slash",
    ),
    pytest.param(
        Snapshot(
            f"{API}/couch/orders",
            200,
            b'{"db_name": "orders", "doc_count": 1200, "update_seq": "1-x"}',
            content_type="application/json",
        ),
        "the snapshot describes a database (db_name, doc_count), not its documents",
        id="couchdb-database",
    ),
]


@pytest.mark.parametrize(("snap", "why"), COLLECTIONS)
def test_a_collection_is_never_written_back(snap: Snapshot, why: str) -> None:
    deleted = prepare(Plan("recreate", snapshot_url=snap.url), facts("DELETE", snap.url, snap=snap))
    assert deleted["ready"] is False and "method" not in deleted
    assert deleted["reason"] == (
        f"{why}; deleting it deleted what it contained, which the snapshot does not hold: "
        "rebuild it by hand"
    )
    changed = prepare(Plan("restore", snapshot_url=snap.url), facts("PATCH", snap.url, snap=snap))
    assert changed["ready"] is False
    assert changed["reason"] == f"{why}; it cannot be restored by writing the snapshot back"


@pytest.mark.parametrize(
    "snap",
    [
        Snapshot(f"{API}/contacts/7/", 200, b'{"id": 7}', content_type="application/json"),
        Snapshot(f"{API}/site/index.html", 200, b"<title>Home</title>", content_type="text/html"),
    ],
    ids=["object-with-trailing-slash", "an-html-page"],
)
def test_a_resource_that_only_resembles_a_collection_is_still_restored(snap: Snapshot) -> None:
    comp = prepare(Plan("recreate", snapshot_url=snap.url), facts("DELETE", snap.url, snap=snap))
    assert comp["ready"] is True and comp["method"] == "PUT"


@pytest.mark.parametrize("status", [404, 410])
@pytest.mark.parametrize("answer", [404, 410, 500])
def test_recreate_of_something_that_did_not_exist_is_a_noop_with_its_read(
    status: int, answer: int
) -> None:
    p = Plan("recreate", snapshot_url=CONTACT)
    comp = run(p, facts("DELETE", CONTACT, snap=snapshot(CONTACT, status=status)), answer)
    assert comp["ready"] is False
    assert comp["noop"] == "the target did not exist before the DELETE"
    assert comp["noop_evidence"] == {
        "kind": "read",
        "detail": f"GET {CONTACT} answered {status} just before it",
    }
    assert "method" not in comp


@pytest.mark.parametrize("answer", [200, 202, 204])
def test_a_delete_that_says_it_deleted_what_read_as_absent_is_irreversible(answer: int) -> None:
    # An API whose GET and DELETE address a resource differently (by name vs by id): the
    # DELETE may have deleted something the read before it could not see.
    p = Plan("recreate", snapshot_url=CONTACT)
    comp = run(p, facts("DELETE", CONTACT, snap=snapshot(CONTACT, status=404)), answer)
    assert "noop" not in comp
    assert comp["ready"] is False
    assert f"answered 404, yet the DELETE answered {answer}" in comp["reason"]


def test_recreate_without_a_snapshot_is_irreversible() -> None:
    comp = prepare(Plan("recreate", snapshot_url=CONTACT), facts("DELETE", CONTACT))
    assert comp["ready"] is False
    assert comp["reason"] == "no snapshot was taken, so the deleted resource cannot be rebuilt"


def test_recreate_is_unchanged_by_a_successful_delete() -> None:
    p = Plan("recreate", snapshot_url=CONTACT)
    f = facts("DELETE", CONTACT, snap=snapshot(CONTACT, body=PRIOR))
    before = prepare(p, f)
    after = complete(p, before, respond(f, 204))
    assert after == before
    assert "after" not in after


# --- explicit templates, complete before the response ---------------------------------------

RENAME = """
match: {host: crm.example.test, method: PATCH, path: "/items/{id}"}
compensate:
  method: PATCH
  url: /items/{id}
  headers: {X-Reason: "undo rename to ${request.body.name}"}
  body: {name: "${snapshot.body.name}"}
"""
PUT_BACK = """
match: {host: crm.example.test, method: PUT, path: "/items/{id}"}
compensate: {method: put, url: "/items/{id}", body: "${snapshot.body}"}
"""
ABSOLUTE = """
match: {host: crm.example.test, method: POST, path: "/items/{id}/archive"}
compensate: {method: POST, url: "https://admin.example.test/restore/{id}"}
"""
SNAPSHOT_ITEM = {"id": "7", "name": "seven", "tags": ["a", "b"], "meta": {"n": 1}}

BEFORE_RESPONSE: list[Any] = [
    pytest.param(
        RENAME,
        "PATCH",
        f"{API}/items/7",
        {
            "method": "PATCH",
            "url": f"{API}/items/7",
            "body": {"name": "seven"},
            "content_type": "application/json",
            "headers": {"X-Reason": "undo rename to renamed"},
        },
        id="relative-url-captures-request-and-snapshot",
    ),
    pytest.param(
        RENAME,
        "PATCH",
        "http://crm.example.test:8443/items/7?x=1",
        {
            "method": "PATCH",
            "url": "http://crm.example.test:8443/items/7",
            "body": {"name": "seven"},
            "content_type": "application/json",
            "headers": {"X-Reason": "undo rename to renamed"},
        },
        id="relative-url-keeps-scheme-host-port",
    ),
    pytest.param(
        PUT_BACK,
        "PUT",
        f"{API}/items/7",
        {
            "method": "PUT",
            "url": f"{API}/items/7",
            "body": SNAPSHOT_ITEM,
            "content_type": "application/json",
        },
        id="whole-snapshot-body-stays-an-object",
    ),
    pytest.param(
        ABSOLUTE,
        "POST",
        f"{API}/items/7/archive",
        {
            "method": "POST",
            "url": "https://admin.example.test/restore/7",
            "body": None,
            "content_type": None,
        },
        id="absolute-url-no-body",
    ),
]


@pytest.mark.parametrize(("rule_text", "method", "url", "inverse"), BEFORE_RESPONSE)
def test_template_without_response_references_is_ready_before_forwarding(
    rule_text: str, method: str, url: str, inverse: dict[str, Any]
) -> None:
    snap = snapshot(f"{API}/items/7", body=SNAPSHOT_ITEM)
    p, f = step(rule_text, method, url, {"name": "renamed"}, snap=snap)
    comp = prepare(p, f)
    assert comp["ready"] is True
    assert sent_json(comp) == inverse
    # The response changes nothing already built.
    assert complete(p, comp, respond(f, 200, {"id": "7", "name": "other"})) == comp


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        pytest.param("application/x-www-form-urlencoded", "state=open", id="form-text-body"),
        pytest.param("application/merge-patch+json", "{state: open}", id="merge-patch-json-body"),
    ],
)
def test_template_content_type_header_is_the_one_sent(content_type: str, body: str) -> None:
    rule_text = f"""
        match: {{host: crm.example.test, method: PATCH, path: "/tickets/{{id}}"}}
        compensate:
          method: PATCH
          url: /tickets/{{id}}
          headers: {{Content-Type: "{content_type}"}}
          body: {body}
        """
    p, f = step(rule_text, "PATCH", f"{API}/tickets/7", {"state": "closed"})
    comp = prepare(p, f)
    assert comp["ready"] is True
    # Rollback sends the record's content_type over the template's headers: they must agree.
    headers = {k.lower(): v for k, v in (comp.get("headers") or {}).items()}
    named = {t for t in (headers.get("content-type"), comp.get("content_type")) if t}
    assert named == {content_type}


# --- explicit templates that need the response ----------------------------------------------

ISSUE = """
match: {host: api.github.com, method: POST, path: "/repos/{owner}/{repo}/issues"}
compensate:
  method: PATCH
  url: /repos/{owner}/{repo}/issues/${response.body.number}
  body: {state: closed}
"""
BY_LOCATION = """
match: {host: crm.example.test, method: POST}
compensate: {method: DELETE, url: "${response.headers.Location}"}
"""
UNDO_BATCH = """
match: {host: crm.example.test, method: POST, path: /batches}
compensate:
  method: POST
  url: /batches/${response.body.batch.id}/undo
  headers: {X-Undo-Count: "${response.body.count}"}
  body: {items: "${response.body.batch.items}", count: "${response.body.count}"}
"""
ISSUES_URL = "https://api.github.com/repos/acme/web/issues"
BATCH = {"batch": {"id": "b1", "items": [{"id": 1}, {"id": 2}]}, "count": 2}

AFTER_RESPONSE: list[Any] = [
    pytest.param(
        ISSUE,
        ISSUES_URL,
        201,
        {"number": 42, "title": "Bug"},
        {},
        {
            "method": "PATCH",
            "url": f"{ISSUES_URL}/42",
            "body": {"state": "closed"},
            "content_type": "application/json",
        },
        id="response-body-number",
    ),
    pytest.param(
        BY_LOCATION,
        f"{API}/contacts",
        201,
        b"",
        {"Location": "/contacts/9"},
        {"method": "DELETE", "url": f"{API}/contacts/9", "body": None, "content_type": None},
        id="response-header-relative",
    ),
    pytest.param(
        BY_LOCATION,
        f"{API}/contacts",
        201,
        b"",
        {"location": f"{API}/contacts/9"},
        {"method": "DELETE", "url": f"{API}/contacts/9", "body": None, "content_type": None},
        id="response-header-any-case",
    ),
    pytest.param(
        UNDO_BATCH,
        f"{API}/batches",
        200,
        BATCH,
        {},
        {
            "method": "POST",
            "url": f"{API}/batches/b1/undo",
            "body": {"items": [{"id": 1}, {"id": 2}], "count": 2},
            "content_type": "application/json",
            "headers": {"X-Undo-Count": "2"},
        },
        id="whole-values-keep-their-type",
    ),
]


@pytest.mark.parametrize(
    ("rule_text", "url", "status", "body", "headers", "inverse"), AFTER_RESPONSE
)
def test_template_with_response_references_is_completed_after_the_response(
    rule_text: str,
    url: str,
    status: int,
    body: Any,
    headers: dict[str, str],
    inverse: dict[str, Any],
) -> None:
    p, f = step(rule_text, "POST", url, {"title": "Bug"})
    before = prepare(p, f)
    assert before["ready"] is False
    assert "method" not in before
    comp = complete(p, before, respond(f, status, body, headers))
    assert comp["ready"] is True
    assert sent_json(comp) == inverse


MISSING: list[Any] = [
    pytest.param(
        ISSUE,
        ISSUES_URL,
        {"title": "Bug"},
        None,
        {"id": 1},
        {},
        "${response.body.number}: no value in the response body",
        id="response-body-value",
    ),
    pytest.param(
        ISSUE,
        ISSUES_URL,
        {"title": "Bug"},
        None,
        b"created",
        {},
        "${response.body.number}: no value in the response body (empty or not JSON)",
        id="response-not-json",
    ),
    pytest.param(
        BY_LOCATION,
        f"{API}/contacts",
        {"name": "Ada"},
        None,
        {"id": 9},
        {},
        "${response.headers.Location}: no Location header in the response",
        id="response-header",
    ),
    pytest.param(
        RENAME,
        f"{API}/items/7",
        {"title": "no name"},
        snapshot(f"{API}/items/7", body=SNAPSHOT_ITEM),
        {},
        {},
        "${request.body.name}: no value in the request body",
        id="request-body-value",
    ),
    pytest.param(
        RENAME,
        f"{API}/items/7",
        {"name": "renamed"},
        snapshot(f"{API}/items/7", status=404),
        {},
        {},
        "${snapshot.body.name}: no value in the snapshot body (empty or not JSON)",
        id="snapshot-of-nothing",
    ),
]


@pytest.mark.parametrize(
    ("rule_text", "url", "request_body", "snap", "body", "headers", "error"), MISSING
)
def test_template_with_a_missing_value_is_irreversible_with_the_template_error(
    rule_text: str,
    url: str,
    request_body: Any,
    snap: Snapshot | None,
    body: Any,
    headers: dict[str, str],
    error: str,
) -> None:
    method = "PATCH" if rule_text is RENAME else "POST"
    p, f = step(rule_text, method, url, request_body, snap=snap)
    comp = run(p, f, 200, body, headers)
    assert comp["ready"] is False
    assert "method" not in comp
    assert comp["reason"] == f"the rule's compensation template cannot be filled in: {error}"


# --- delete-created ---------------------------------------------------------------------------

CREATED: list[Any] = [
    pytest.param(
        f"{API}/contacts",
        {"Location": f"{API}/contacts/9"},
        b"",
        f"{API}/contacts/9",
        id="location-absolute",
    ),
    pytest.param(
        f"{API}/contacts",
        {"Location": "/contacts/9"},
        b"",
        f"{API}/contacts/9",
        id="location-relative",
    ),
    pytest.param(
        f"{API}/contacts",
        {"location": "/contacts/9"},
        b"",
        f"{API}/contacts/9",
        id="location-any-case",
    ),
    pytest.param(
        f"{API}/contacts",
        {"Location": "https://crm.example.test:443/contacts/9"},
        b"",
        "https://crm.example.test:443/contacts/9",
        id="location-default-port-written-out",
    ),
    pytest.param(
        "http://127.0.0.1:8080/v1/contacts",
        {"Location": "/v1/contacts/9"},
        b"",
        "http://127.0.0.1:8080/v1/contacts/9",
        id="location-relative-keeps-port",
    ),
    pytest.param(
        f"{API}/contacts",
        {"Location": "/contacts/9"},
        {"id": 5},
        f"{API}/contacts/9",
        id="location-wins-over-id",
    ),
    pytest.param(
        f"{API}/contacts?draft=1", {}, {"id": 9}, f"{API}/contacts/9", id="id-number-query-dropped"
    ),
    pytest.param(
        f"{API}/contacts/", {}, {"id": "c_9"}, f"{API}/contacts/c_9", id="id-string-trailing-slash"
    ),
    pytest.param(
        f"{API}/contacts", {}, {"id": "a b?c"}, f"{API}/contacts/a%20b%3Fc", id="id-escaped"
    ),
]


@pytest.mark.parametrize(("url", "headers", "body", "target"), CREATED)
def test_delete_created_deletes_what_the_post_created(
    url: str, headers: dict[str, str], body: Any, target: str
) -> None:
    p, f = step(None, "POST", url, {"name": "Ada"})
    assert p.kind == "delete-created"
    assert prepare(p, f)["ready"] is False  # nothing is known before the response
    comp = run(p, f, 201, body, headers)
    assert comp["ready"] is True
    assert sent(comp) == {"method": "DELETE", "url": target, "body": None, "content_type": None}


def _elsewhere(location: str) -> str:
    return (
        f"the created resource's Location {location} is on another host; "
        "delete it by hand if needed"
    )


NOTHING_NAMED = (
    f"the response to POST {API}/contacts names nothing it created (no Location header, no id): "
    "check by hand what it created"
)

NOT_CREATED: list[Any] = [
    pytest.param(
        {"Location": "https://cdn.example.test/contacts/9"},
        b"",
        _elsewhere("https://cdn.example.test/contacts/9"),
        id="location-other-host",
    ),
    pytest.param(
        {"Location": "https://crm.example.test:8443/contacts/9"},
        b"",
        _elsewhere("https://crm.example.test:8443/contacts/9"),
        id="location-other-port",
    ),
    pytest.param(
        {"Location": "http://crm.example.test/contacts/9"},
        b"",
        _elsewhere("http://crm.example.test/contacts/9"),
        id="location-other-scheme",
    ),
    pytest.param(
        {"Location": "//cdn.example.test/contacts/9"},
        {"id": 9},
        _elsewhere("//cdn.example.test/contacts/9"),
        id="location-scheme-relative",
    ),
    pytest.param({}, {"name": "Ada"}, NOTHING_NAMED, id="no-id"),
    pytest.param({}, b"", NOTHING_NAMED, id="empty-body"),
    pytest.param({}, b"created", NOTHING_NAMED, id="not-json"),
    pytest.param({}, [{"id": 9}], NOTHING_NAMED, id="list-body"),
    pytest.param({}, {"data": [{"id": 9}]}, NOTHING_NAMED, id="nested-list"),
    pytest.param({}, {"id": None}, NOTHING_NAMED, id="null-id"),
    pytest.param({}, {"id": True}, NOTHING_NAMED, id="boolean-id"),
    pytest.param({}, {"id": ""}, NOTHING_NAMED, id="empty-id"),
    # An id that is a path of its own would make the DELETE hit the collection or its parent.
    pytest.param(
        {},
        {"id": ".."},
        "the response's id '..' is not a resource name; check by hand what the POST created",
        id="dot-dot-id",
    ),
    pytest.param(
        {},
        {"id": "."},
        "the response's id '.' is not a resource name; check by hand what the POST created",
        id="dot-id",
    ),
    pytest.param(
        {},
        {"id": "a/b"},
        "the response's id 'a/b' contains '/' and would name another path; "
        "check by hand what the POST created",
        id="slash-id",
    ),
    pytest.param(
        {"Location": "/contacts/.."},
        b"",
        "the created resource's Location /contacts/.. has dot segments; "
        "delete it by hand if needed",
        id="location-dot-segments",
    ),
    pytest.param(
        {"Location": "/contacts"},
        b"",
        "the created resource's Location /contacts names the request's own URL or a parent "
        "of it; deleting that would delete more than the POST created",
        id="location-is-the-collection",
    ),
    pytest.param(
        {"Location": "https://user:pw@crm.example.test/contacts/9"},
        b"",
        "the created resource's Location carries credentials (user:password@); "
        "delete it by hand if needed",
        id="location-userinfo",
    ),
    # A JSON-RPC answer's id echoes the request's id (MCP tools/call, ...).
    pytest.param(
        {},
        {"jsonrpc": "2.0", "id": 2, "result": {"content": []}},
        f"POST {API}/contacts is a JSON-RPC call: its answer's id echoes the request, it does "
        "not name a created resource; check by hand what the call did",
        id="json-rpc-answer",
    ),
]


@pytest.mark.parametrize(("headers", "body", "reason"), NOT_CREATED)
def test_delete_created_that_cannot_tell_what_was_created_is_irreversible(
    headers: dict[str, str], body: Any, reason: str
) -> None:
    p, f = step(None, "POST", f"{API}/contacts?draft=1", {"name": "Ada"})
    comp = run(p, f, 201, body, headers)
    assert comp["ready"] is False
    assert "method" not in comp
    assert comp["reason"] == reason


# --- failed requests: nothing to undo --------------------------------------------------------

PRIOR_SNAPSHOT = snapshot(CONTACT, body=PRIOR)
KINDS: list[Any] = [
    pytest.param(Plan("restore", snapshot_url=CONTACT), "PUT", id="restore"),
    pytest.param(Plan("recreate", snapshot_url=CONTACT), "DELETE", id="recreate"),
    pytest.param(Plan("delete-created"), "POST", id="delete-created"),
    pytest.param(
        Plan("template", template={"method": "PUT", "url": "/x", "body": "${snapshot.body}"}),
        "PUT",
        id="template-ready-before",
    ),
    pytest.param(
        Plan("template", template={"method": "DELETE", "url": "/x/${response.body.id}"}),
        "POST",
        id="template-needing-response",
    ),
    pytest.param(Plan("github.close-issue"), "POST", id="pack"),
]


@pytest.mark.parametrize("status", [302, 303, 400, 404, 409, 500, 502])
@pytest.mark.parametrize(("p", "method"), KINDS)
def test_an_error_answer_is_no_evidence_that_nothing_changed(
    p: Plan, method: str, status: int
) -> None:
    # A PUT answered 502 may have landed, a POST answered 303 may have created something:
    # the record claims nothing; what was prepared from the snapshot stays for rollback,
    # which decides by reading the target.
    prepared = prepare(p, facts(method, CONTACT, snap=PRIOR_SNAPSHOT))
    comp = run(p, facts(method, CONTACT, snap=PRIOR_SNAPSHOT), status, {"error": "no"})
    assert "noop" not in comp and "noop_evidence" not in comp
    assert "reason" not in comp
    assert comp == prepared


def test_an_irreversible_plan_stays_irreversible_whatever_the_response() -> None:
    p = Plan("irreversible", reason="rule r says compensate: none")
    f = facts("POST", CONTACT)
    comp = prepare(p, f)
    assert comp == {
        "kind": "irreversible",
        "ready": False,
        "reason": "rule r says compensate: none",
        "snapshot_url": None,
    }
    assert complete(p, comp, respond(f, 201, {"id": 9})) == comp


# --- the after-image: the drift baseline of restore --------------------------------------------

AFTER: list[Any] = [
    pytest.param({"ETag": '"v2"'}, {"id": 7}, {"etag": '"v2"'}, id="etag"),
    pytest.param({"etag": 'W/"v2"'}, b"", {"etag": 'W/"v2"'}, id="weak-etag-any-case"),
    # An answer's body is not always the target's representation ({"ok": true}): never
    # taken for one; a read right after the write gives the baseline.
    pytest.param({}, b'{"name":"Eve","id":7}', None, id="json-body-is-not-the-baseline"),
    pytest.param({}, b'{"ok": true}', None, id="a-status-message"),
    pytest.param({}, b"", None, id="no-body"),
    pytest.param({}, {}, None, id="empty-object"),
    pytest.param({}, [{"id": 7}], None, id="json-list"),
    pytest.param({}, b"OK", None, id="not-json"),
]


@pytest.mark.parametrize(("headers", "body", "after"), AFTER)
@pytest.mark.parametrize(
    "snap", [PRIOR_SNAPSHOT, snapshot(CONTACT, status=404)], ids=["existed", "created"]
)
def test_restore_records_what_the_agents_write_produced(
    headers: dict[str, str], body: Any, after: dict[str, str] | None, snap: Snapshot
) -> None:
    p = Plan("restore", snapshot_url=CONTACT)
    comp = run(p, facts("PUT", CONTACT, {"name": "Eve"}, snap=snap), 200, body, headers)
    assert comp["ready"] is True
    if not snap.existed:
        # 200 to a write on a URL that read as absent: an update, not a creation (RFC 9110);
        # only a read right after it shows whether the write went to this URL.
        after = None
    assert comp["after"] == after
    # Nothing in the response tells what the write produced: the proxy must GET it.
    assert comp["needs_after_read"] is (after is None)


def test_a_creating_put_answered_201_keeps_its_etag() -> None:
    p = Plan("restore", snapshot_url=CONTACT)
    f = facts("PUT", CONTACT, {"name": "Eve"}, snap=snapshot(CONTACT, status=404))
    comp = run(p, f, 201, b"", {"ETag": '"v1"'})
    assert comp["after"] == {"etag": '"v1"'} and comp["needs_after_read"] is False


@pytest.mark.parametrize(("p", "method"), [k for k in KINDS if k.id != "restore"])
def test_only_restore_records_an_after_image(p: Plan, method: str) -> None:
    comp = run(p, facts(method, CONTACT, snap=PRIOR_SNAPSHOT), 200, {"id": 9}, {"ETag": '"v2"'})
    assert "after" not in comp
    assert "needs_after_read" not in comp


@pytest.mark.parametrize(
    ("headers", "body", "url", "located"),
    [
        ({"Location": "/contacts/9"}, {}, f"{API}/contacts/9", "location"),
        ({}, {"id": 9}, f"{API}/contacts/9", "id"),
        ({}, {"data": {"id": "r-9"}}, f"{API}/contacts/r-9", "id"),  # JSON:API, Kinto
    ],
    ids=["location", "id", "data-id"],
)
def test_delete_created_says_where_its_url_came_from(
    headers: dict[str, str], body: Any, url: str, located: str
) -> None:
    # Only a 201's Location names the created resource (RFC 9110); an id appended to the
    # collection is a guess that rollback confirms by reading before it deletes anything.
    p, f = step(None, "POST", f"{API}/contacts", {"name": "Ada"})
    comp = run(p, f, 201, body, headers)
    assert (comp["method"], comp["url"], comp["located"]) == ("DELETE", url, located)
