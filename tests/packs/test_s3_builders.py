"""The s3 pack's compensators as pure functions: what they read first, what they send back,
and what their read-back checks (compensators/s3.py, compensators/targets.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.compensators.helpers import request, rule
from undoproxy.compensators import s3, targets
from undoproxy.compensators.build import complete, prepare
from undoproxy.compensators.model import Facts, Snapshot
from undoproxy.compensators.plan import plan_for

HOST = "https://127.0.0.1:9000"
A = f"{HOST}/bkt/docs/a.txt"
TAGS_XML = (
    b'<?xml version="1.0"?><Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet>'
    b"<Tag><Key>team</Key><Value>blue</Value></Tag></TagSet></Tagging>"
)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://127.0.0.1:9000/bkt/docs/a%20b.txt", "docs/a b.txt"),
        ("https://s3.eu-west-1.amazonaws.com/bkt/k", "k"),
        ("https://bkt.s3.eu-west-1.amazonaws.com/docs/k", "docs/k"),
        ("https://bkt.s3.amazonaws.com/k", "k"),
        ("https://bkt.s3-us-west-2.amazonaws.com/k", "k"),
        ("https://127.0.0.1:9000/bkt", ""),
        ("https://bkt.s3.amazonaws.com/", ""),
    ],
)
def test_the_key_of_path_style_and_virtual_hosted_urls(url: str, key: str) -> None:
    assert s3.key_of(url) == key


def _plan(method: str, url: str, body: bytes = b"", name: str = "s3.object") -> Any:
    r = rule(f"match: {{method: {method}}}\ncompensate: {name}")
    return plan_for(request(method, url, body), r, {}, auto=True)


def test_an_object_write_reads_the_object_and_its_tags_first() -> None:
    plan = _plan("PUT", f"{A}?x-id=PutObject")
    assert (plan.kind, plan.snapshot_url, plan.more_snapshots) == (
        "s3.object",
        A,
        (f"{A}?tagging",),
    )


@pytest.mark.parametrize(
    ("method", "url", "why"),
    [
        ("PUT", f"{HOST}/bkt", "bucket-level operation"),
        ("PUT", f"{A}?partNumber=1&uploadId=x", "?partNumber, ?uploadId"),
        ("DELETE", f"{A}?versionId=3", "?versionId"),
        ("PUT", f"{A}?acl", "?acl"),
    ],
)
def test_what_the_pack_cannot_undo_is_irreversible_before_it_is_sent(
    method: str, url: str, why: str
) -> None:
    plan = _plan(method, url)
    assert plan.irreversible and why in (plan.reason or "")


def _facts(method: str, url: str, snaps: list[Snapshot], body: bytes = b"") -> Facts:
    return Facts(method, url, {}, body, snaps[0], snapshots={s.url: s for s in snaps})


def _done(plan: Any, f: Facts, body: bytes = b"", headers: dict[str, str] | None = None) -> Any:
    comp = prepare(plan, f)
    f.response_status, f.response_headers, f.response_body = 200, headers or {}, body
    return complete(plan, comp, f)


def test_an_overwrite_puts_back_body_headers_metadata_and_tags() -> None:
    before = Snapshot(
        A,
        200,
        b"first draft",
        content_type="text/plain",
        headers={
            "content-type": "text/plain",
            "cache-control": "max-age=60",
            "x-amz-meta-owner": "ada",
        },
    )
    tags = Snapshot(f"{A}?tagging", 200, TAGS_XML)
    comp = _done(_plan("PUT", A), _facts("PUT", A, [before, tags]), headers={"ETag": '"e1"'})
    assert (comp["method"], comp["url"], comp["content_type"]) == ("PUT", A, "text/plain")
    assert comp["headers"] == {
        "cache-control": "max-age=60",
        "x-amz-meta-owner": "ada",
        "x-amz-tagging": "team=blue",
    }
    assert comp["readback"] == {
        "targets": [
            {
                "url": A,
                "sha256": hashlib.sha256(b"first draft").hexdigest(),
                "length": 11,
                "headers": before.headers,
            },
            {"url": f"{A}?tagging", "tags": [["team", "blue"]]},
        ],
        "left": [{"url": A, "etag": '"e1"'}],
    }


def test_a_created_object_is_deleted_and_a_missing_one_deleted_is_nothing() -> None:
    missing = [Snapshot(A, 404), Snapshot(f"{A}?tagging", 404)]
    comp = _done(_plan("PUT", A), _facts("PUT", A, missing))
    assert (comp["method"], comp["readback"]["targets"]) == ("DELETE", [{"url": A, "gone": True}])
    comp = _done(_plan("DELETE", A), _facts("DELETE", A, missing))
    assert comp["noop"] == "the object did not exist before the DELETE"


def test_delete_objects_puts_back_only_keys_that_existed_and_were_deleted() -> None:
    body = (
        b"<Delete><Object><Key>a.txt</Key></Object><Object><Key>b.txt</Key></Object>"
        b"<Object><Key>new.txt</Key></Object><Object><Key>locked.txt</Key></Object></Delete>"
    )
    url = f"{HOST}/bkt?delete"
    plan = _plan("POST", url, body, "s3.delete-objects")
    key = f"{HOST}/bkt/"
    assert [plan.snapshot_url, *plan.more_snapshots][:2] == [f"{key}a.txt", f"{key}a.txt?tagging"]
    snaps = [
        Snapshot(f"{key}a.txt", 200, b"A", content_type="text/plain"),
        Snapshot(f"{key}a.txt?tagging", 200, TAGS_XML),
        Snapshot(f"{key}b.txt", 200, b"B", content_type="text/plain"),
        Snapshot(f"{key}b.txt?tagging", 200, b"<Tagging><TagSet/></Tagging>"),
        Snapshot(f"{key}new.txt", 404),
        Snapshot(f"{key}new.txt?tagging", 404),
        Snapshot(f"{key}locked.txt", 200, b"L"),
        Snapshot(f"{key}locked.txt?tagging", 200, TAGS_XML),
    ]
    answer = (
        b"<DeleteResult><Deleted><Key>a.txt</Key></Deleted><Deleted><Key>b.txt</Key></Deleted>"
        b"<Deleted><Key>new.txt</Key></Deleted>"
        b"<Error><Key>locked.txt</Key><Code>AccessDenied</Code></Error></DeleteResult>"
    )
    comp = _done(plan, _facts("POST", url, snaps, body), answer)
    assert (comp["method"], comp["url"]) == ("PUT", f"{key}a.txt")
    assert [(t["method"], t["url"]) for t in comp["then"]] == [("PUT", f"{key}b.txt")]
    assert comp["readback"]["left"] == [targets.gone(f"{key}a.txt"), targets.gone(f"{key}b.txt")]


def test_deleting_versions_or_too_many_keys_is_irreversible() -> None:
    url = f"{HOST}/bkt?delete"
    versioned = b"<Delete><Object><Key>a</Key><VersionId>3</VersionId></Object></Delete>"
    assert "permanent" in (_plan("POST", url, versioned, "s3.delete-objects").reason or "")
    many = b"<Delete>" + b"<Object><Key>k</Key></Object>" * (s3.MAX_KEYS + 1) + b"</Delete>"
    assert "at most 100" in (_plan("POST", url, many, "s3.delete-objects").reason or "")


def test_tags_go_back_as_they_were_or_are_deleted_when_there_were_none() -> None:
    url = f"{A}?tagging"
    agent_tags = targets.tagging_xml([("stage", "final")])
    comp = _done(
        _plan("PUT", url, agent_tags, "s3.tagging"),
        _facts("PUT", url, [Snapshot(url, 200, TAGS_XML)], agent_tags),
    )
    assert (comp["method"], targets.parse_tags(s3_body(comp))) == ("PUT", [("team", "blue")])
    assert comp["readback"]["left"] == [targets.tags(url, [("stage", "final")])]
    empty = Snapshot(url, 200, b"<Tagging><TagSet/></Tagging>")
    comp = _done(
        _plan("PUT", url, agent_tags, "s3.tagging"), _facts("PUT", url, [empty], agent_tags)
    )
    assert comp["method"] == "DELETE"


def s3_body(comp: dict[str, Any]) -> bytes:
    import base64

    return base64.b64decode(comp["body_b64"])


@pytest.mark.parametrize(
    ("check", "status", "headers", "body", "found"),
    [
        (targets.gone(A), 404, {}, b"", []),
        (targets.gone(A), 200, {}, b"x", ["it exists (GET answered 200)"]),
        (
            targets.same_as(Snapshot(A, 200, b"x", headers={"x-amz-meta-a": "1"})),
            200,
            {"X-Amz-Meta-A": "1", "ETag": '"z"'},
            b"x",
            [],
        ),
        (
            targets.same_as(Snapshot(A, 200, b"x", headers={"x-amz-meta-a": "1"})),
            200,
            {"Cache-Control": "no-cache"},
            b"xy",
            [
                "the body differs (2 bytes, was 1 bytes)",
                "header cache-control was not there before",
                "header x-amz-meta-a is missing",
            ],
        ),
        (
            targets.tags(A, [("b", "2"), ("a", "1")]),
            200,
            {},
            b"<Tagging><TagSet>"
            b"<Tag><Key>a</Key><Value>1</Value></Tag><Tag><Key>b</Key><Value>2</Value></Tag>"
            b"</TagSet></Tagging>",
            [],
        ),
        (targets.tags(A, []), 200, {}, TAGS_XML, ["the tags differ"]),
        (targets.etag(A, '"e1"'), 200, {"etag": 'W/"e1"'}, b"", []),
    ],
)
def test_target_checks_name_what_differs_never_values(
    check: targets.Check, status: int, headers: dict[str, str], body: bytes, found: list[str]
) -> None:
    assert targets.differences(check, status, headers, body) == found
