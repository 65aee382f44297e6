"""The webdav pack's compensators as pure functions: what each operation reads before it is
forwarded, the inverse built from those reads, what is irreversible and why, and the PROPFIND
read-back checks (which name properties, never their values)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from undoproxy.compensators import davcheck, davmove, davxml, webdav
from undoproxy.compensators.build import prepare
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, Plan, Snapshot

BASE = "https://dav.test"
XML = "application/xml"


def multistatus(*responses: tuple[str, str]) -> bytes:
    """A 207 body: (href, the <D:prop> content found with 200)."""
    parts = "".join(
        f"<D:response><D:href>{href}</D:href><D:propstat><D:prop>{props}</D:prop>"
        "<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
        for href, props in responses
    )
    return (
        f'<?xml version="1.0"?><D:multistatus xmlns:D="DAV:" xmlns:T="urn:t">{parts}'
        "</D:multistatus>"
    ).encode()


FILE = "<D:resourcetype/><D:getetag>x</D:getetag>"
FOLDER = "<D:resourcetype><D:collection/></D:resourcetype>"
RED = '<T:color>red</T:color><T:meta><T:k a="1">v</T:k></T:meta>'


def facts(method: str, path: str, body: bytes = b"", **headers: str) -> Facts:
    return Facts(method, BASE + path, request_body=body, request_headers=headers)


def found(path: str, props: str, status: int = 207) -> Snapshot:
    return Snapshot(BASE + path, status, multistatus((path, props)) if status == 207 else b"")


def answered(f: Facts, status: int, headers: dict[str, str] | None = None) -> Facts:
    f.response_status, f.response_headers, f.response_body = status, headers or {}, b""
    return f


def test_a_move_reads_source_and_destination_and_moves_back_without_overwriting() -> None:
    f = facts("MOVE", "/docs/a.txt", destination="/docs/b.txt")
    assert [(r.name, r.method, r.url, r.headers.get("Depth")) for r in davmove.move_reads(f)] == [
        ("source", "PROPFIND", f"{BASE}/docs/a.txt", "1"),
        ("source_body", "GET", f"{BASE}/docs/a.txt", None),
        ("dest", "PROPFIND", f"{BASE}/docs/b.txt", "0"),
        ("dest_body", "GET", f"{BASE}/docs/b.txt", None),
    ]
    f.reads = {
        "source": found("/docs/a.txt", FILE + RED),
        "source_body": Snapshot(f"{BASE}/docs/a.txt", 200, b"A", content_type="text/plain"),
        "dest": found("/docs/b.txt", FILE, 404),
        "dest_body": Snapshot(f"{BASE}/docs/b.txt", 404),
    }
    out = davmove.move_back(answered(f, 201))
    assert (out["method"], out["url"]) == ("MOVE", f"{BASE}/docs/b.txt")
    assert out["headers"] == {
        "Destination": f"{BASE}/docs/a.txt",
        "Overwrite": "F",
        "Depth": "infinity",
    }
    assert "then" not in out
    checks = out["readback"]["targets"]
    assert set(checks[0]["dead"]) == {"{urn:t}color", "{urn:t}meta"}
    assert checks[1]["length"] == 1 and checks[2] == {"url": f"{BASE}/docs/b.txt", "gone": True}
    assert out["readback"]["left"] == [{"url": f"{BASE}/docs/a.txt", "gone": True}]


def test_a_move_over_a_file_puts_that_file_and_its_properties_back_afterwards() -> None:
    f = facts("MOVE", "/docs/a.txt", destination=f"{BASE}/docs/b.txt")
    f.reads = {
        "source": found("/docs/a.txt", FILE),
        "source_body": Snapshot(f"{BASE}/docs/a.txt", 200, b"A"),
        "dest": found("/docs/b.txt", FILE + RED),
        "dest_body": Snapshot(f"{BASE}/docs/b.txt", 200, b"B", content_type="text/plain"),
    }
    out = davmove.move_back(answered(f, 204))
    put, proppatch = out["then"]
    assert (put["method"], put["content_type"]) == ("PUT", "text/plain")
    assert proppatch["method"] == "PROPPATCH"
    sets, removes = davxml.proppatch_names(webdav_body(proppatch))
    assert set(sets) == {"{urn:t}color", "{urn:t}meta"} and removes == []


def webdav_body(request: dict[str, Any]) -> bytes:
    return base64.b64decode(request["body_b64"])


@pytest.mark.parametrize(
    ("destination", "why"),
    [
        ("https://elsewhere.test/a.txt", "another host"),
        ("https://u:p@dav.test/a.txt", "credentials"),
        ("", "no Destination"),
    ],
)
def test_a_move_it_cannot_undo_says_why(destination: str, why: str) -> None:
    f = facts("MOVE", "/docs/a.txt", **({"destination": destination} if destination else {}))
    assert davmove.move_reads(f) == []  # nothing is read there, credentials stay home
    with pytest.raises(Irreversible, match=why):
        davmove.move_back(answered(f, 201))


@pytest.mark.parametrize("method", ["MOVE", "COPY"])
def test_a_move_or_copy_over_a_collection_is_irreversible(method: str) -> None:
    f = facts(method, "/docs/a.txt", destination="/other/")
    f.reads = {
        "source": found("/docs/a.txt", FILE),
        "source_body": Snapshot(f"{BASE}/docs/a.txt", 200, b"A"),
        "dest": found("/other/", FOLDER),
        "dest_body": Snapshot(f"{BASE}/other/", 200, b"<html>listing</html>"),
    }
    build = davmove.move_back if method == "MOVE" else davmove.undo_copy
    with pytest.raises(Irreversible, match="replaced the collection"):
        build(answered(f, 204))


def test_a_copy_over_a_file_removes_the_properties_the_copy_brought() -> None:
    f = facts("COPY", "/docs/a.txt", destination="/docs/b.txt")
    f.reads = {
        "source": found("/docs/a.txt", FILE + RED + "<T:owner>ada</T:owner>"),
        "dest": found("/docs/b.txt", FILE + "<T:color>green</T:color>"),
        "dest_body": Snapshot(f"{BASE}/docs/b.txt", 200, b"B"),
    }
    out = davmove.undo_copy(answered(f, 204))
    assert out["method"] == "PUT"
    sets, removes = davxml.proppatch_names(webdav_body(out["then"][0]))
    assert list(sets) == ["{urn:t}color"] and "green" in sets["{urn:t}color"]
    assert sorted(removes) == ["{urn:t}meta", "{urn:t}owner"]


PATCH = (
    b'<D:propertyupdate xmlns:D="DAV:" xmlns:T="urn:t"><D:set><D:prop><T:color>blue</T:color>'
    b"</D:prop></D:set><D:remove><D:prop><T:meta/></D:prop></D:remove></D:propertyupdate>"
)


def test_proppatch_reads_exactly_its_properties_and_sends_back_their_prior_values() -> None:
    f = facts("PROPPATCH", "/docs/a.txt", PATCH)
    [read] = webdav.proppatch_reads(f)
    assert b"<D:prop>" in read.body and b"color" in read.body and b"allprop" not in read.body
    prior = multistatus(("/docs/a.txt", "<T:meta><T:k>v</T:k></T:meta>")).replace(
        b"</D:response>",
        b"<D:propstat><D:prop><T:color/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status>"
        b"</D:propstat></D:response>",
    )
    f.reads = {"props": Snapshot(f"{BASE}/docs/a.txt", 207, prior)}
    out = webdav.restore_properties(answered(f, 207))
    sets, removes = davxml.proppatch_names(webdav_body(out))
    assert list(sets) == ["{urn:t}meta"] and removes == ["{urn:t}color"]
    [expect] = out["readback"]["targets"]
    assert expect["props"]["{urn:t}color"] is None
    [left] = out["readback"]["left"]
    assert left["props"]["{urn:t}meta"] is None and "blue" in left["props"]["{urn:t}color"]


def test_lock_unlocks_with_its_token_and_a_refresh_has_nothing_to_undo() -> None:
    f = answered(facts("LOCK", "/docs/a.txt", b"<lockinfo/>"), 200, {"Lock-Token": "<opaque:1>"})
    out = webdav.unlock(f)
    assert (out["method"], out["headers"]) == ("UNLOCK", {"Lock-Token": "<opaque:1>"})
    made = webdav.unlock(
        answered(facts("LOCK", "/new.txt", b"<lockinfo/>"), 201, {"Lock-Token": "<opaque:2>"})
    )
    assert made["then"][0]["method"] == "DELETE"
    with pytest.raises(NothingToUndo, match="refreshes"):
        webdav.unlock(answered(facts("LOCK", "/docs/a.txt"), 200))


def test_mkcol_not_answered_created_is_irreversible() -> None:
    with pytest.raises(Irreversible, match="not 201"):
        webdav.delete_collection(answered(facts("MKCOL", "/x/"), 200))


def test_recreate_puts_dead_properties_back_and_refuses_a_collection() -> None:
    f = facts("DELETE", "/docs/a.txt")
    f.snapshot = Snapshot(f"{BASE}/docs/a.txt", 200, b"A", content_type="text/plain")
    f.reads = {"props": found("/docs/a.txt", FILE + RED)}
    comp = prepare(Plan("recreate", snapshot_url=f.snapshot.url), f)
    assert comp["ready"] and comp["then"][0]["method"] == "PROPPATCH"
    assert len(comp["readback"]["targets"]) == 2
    f.reads = {"props": found("/cal", FOLDER)}
    f.snapshot = Snapshot(f"{BASE}/cal", 200, b"BEGIN:VCALENDAR", content_type="text/calendar")
    comp = prepare(Plan("recreate", snapshot_url=f.snapshot.url), f)
    assert not comp["ready"] and "collection" in comp["reason"]


def test_values_are_compared_as_xml_and_differences_name_properties_only() -> None:
    assert davxml.same_value(
        '<a:color xmlns:a="urn:t">red</a:color>', '<ns0:color xmlns:ns0="urn:t">red</ns0:color>'
    )
    assert not davxml.same_value('<T:c xmlns:T="urn:t">red</T:c>', None)
    res = davxml.resource(multistatus(("/a", FILE + RED)), f"{BASE}/a")
    check = davcheck.same_properties(f"{BASE}/a", res)
    now = multistatus(("/a", FILE + "<T:color>purple</T:color><T:extra>1</T:extra>"))
    diffs = davcheck.differences(check, 207, now)
    assert diffs == [
        "property {urn:t}color differs",
        "property {urn:t}extra was not there before",
        "property {urn:t}meta is missing",
    ]
    assert not any("purple" in d or "red" in d for d in diffs)
    assert davcheck.differences(check, 404, b"") == ["it is gone (404)"]


def test_dead_properties_leave_out_what_servers_compute() -> None:
    res = davxml.resource(
        multistatus(
            (
                "/c/",
                FOLDER
                + '<R:version xmlns:R="http://radicale.org/ns/">3</R:version>'
                + '<CS:getctag xmlns:CS="http://calendarserver.org/ns/">1</CS:getctag>'
                + '<I:calendar-color xmlns:I="http://apple.com/ns/ical/">#f00</I:calendar-color>',
            )
        ),
        f"{BASE}/c/",
    )
    assert res.collection and list(res.dead()) == ["{http://apple.com/ns/ical/}calendar-color"]


def test_xml_with_entities_is_not_read() -> None:
    with pytest.raises(davxml.NotDav, match="DOCTYPE"):
        davxml.multistatus(b'<!DOCTYPE x [<!ENTITY a "b">]><D:multistatus xmlns:D="DAV:"/>')
