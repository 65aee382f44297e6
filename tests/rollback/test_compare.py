"""How rollback decides whether a target is as before: pure comparisons, table driven."""

from __future__ import annotations

import json
from typing import Any

import pytest

from undoproxy.compensators.model import Snapshot, content_hash
from undoproxy.rollback import compare
from undoproxy.rollback.compare import (
    ABSENT,
    PRESENT,
    UNREADABLE,
    UNSUPPORTED,
    Read,
    changed_since,
    differences,
    normal_etag,
    strong_etag,
)
from undoproxy.upstream import UpstreamResponse

URL = "https://store.example.test/o/a"


def answer(status: int = 200, body: Any = b"", **headers: str) -> UpstreamResponse:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return UpstreamResponse(status, {k.replace("_", "-"): v for k, v in headers.items()}, data)


def snap(body: Any = b"", status: int = 200, **headers: str) -> Snapshot:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    named = {k.replace("_", "-"): v for k, v in headers.items()}
    return Snapshot(URL, status, data, content_type=named.get("content-type"), headers=named)


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (200, PRESENT),
        (204, PRESENT),
        (404, ABSENT),
        (410, ABSENT),
        (405, UNSUPPORTED),
        (501, UNSUPPORTED),
        (401, UNREADABLE),
        (403, UNREADABLE),
        (500, UNREADABLE),
        (503, UNREADABLE),
        (301, UNREADABLE),
    ],
)
def test_only_2xx_404_and_410_are_evidence(status: int, state: str) -> None:
    assert Read(URL, answer(status)).state == state


def test_no_answer_is_unreadable() -> None:
    read = Read(URL, None, "connection refused")
    assert (read.state, read.why) == (UNREADABLE, "connection refused")


@pytest.mark.parametrize(
    ("before", "now", "same"),
    [
        ({"a": 1, "b": [1, 2]}, b'{"b": [1, 2],\n "a": 1}', True),  # JSON as JSON
        ({"a": 1}, {"a": 1.0}, False),
        ({"a": True}, {"a": 1}, False),
        ({"_id": "d", "_rev": "1-x", "v": 1}, {"_id": "d", "_rev": "3-y", "v": 1}, True),
        (b"plain text", b"plain text", True),
        (b"plain text", b"plain text ", False),
    ],
    ids=["formatting", "number-type", "bool-vs-int", "couchdb-rev", "bytes", "bytes-differ"],
)
def test_bodies(before: Any, now: Any, same: bool) -> None:
    diffs = differences(snap(before), answer(200, now))
    assert (diffs == []) is same, diffs


def test_a_json_difference_names_fields_never_values() -> None:
    [diff] = differences(
        snap({"name": "Ada", "password": "hunter2", "old": 1}),
        answer(200, {"name": "Bob", "password": "hunter2", "new": 2}),
    )
    assert diff == "body fields differ (changed: name; added: new; missing: old)"
    assert "Ada" not in diff and "Bob" not in diff


def test_headers_that_are_part_of_the_resource_are_compared() -> None:
    before = snap(b"x", content_type="text/plain", x_amz_meta_owner="ada", cache_control="no-cache")
    now = answer(200, b"x", **{"Content-Type": "text/plain", "x-amz-meta-team": "b"})
    assert differences(before, now) == [
        "header cache-control is missing",
        "header x-amz-meta-owner is missing",
        "header x-amz-meta-team was not there before",
    ]
    same = answer(
        200,
        b"x",
        **{
            "Content-Type": "Text/Plain",
            "X-Amz-Meta-Owner": "ada",
            "Cache-Control": "no-cache",
            "ETag": '"new"',
            "Date": "now",
        },
    )
    assert differences(before, same) == []


def test_a_snapshot_that_kept_only_its_content_type_compares_only_that() -> None:
    legacy = Snapshot(URL, 200, b"x", content_type="text/plain")
    assert differences(legacy, answer(200, b"x", content_type="text/plain", x_amz_meta_a="1")) == []
    assert differences(legacy, answer(200, b"x", content_type="text/html")) == [
        "header content-type differs"
    ]


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        (snap(status=404), answer(404), []),
        (
            snap(status=404),
            answer(200, {"a": 1}),
            ["it exists (GET answered 200); it did not before"],
        ),
        (snap({"a": 1}), answer(410), ["it is gone (GET answered 410)"]),
    ],
)
def test_existence(before: Snapshot, now: UpstreamResponse, expected: list[str]) -> None:
    assert differences(before, now) == expected


@pytest.mark.parametrize(
    ("value", "normal", "strong"),
    [('"x"', '"x"', '"x"'), ('W/"x"', '"x"', None), (' w/"x" ', '"x"', None), (None, None, None)],
)
def test_etags(value: str | None, normal: str | None, strong: str | None) -> None:
    assert (normal_etag(value), strong_etag(value)) == (normal, strong)


@pytest.mark.parametrize(
    ("after", "now", "changed"),
    [
        ({"etag": '"v2"'}, answer(200, etag='W/"v2"'), ""),
        ({"etag": '"v2"'}, answer(200, etag='"v3"'), 'ETag "v2" is now "v3"'),
        ({"etag": '"v2"'}, answer(404), "it is gone (GET answered 404)"),
        ({"sha256": content_hash(b'{"a": 1}')}, answer(200, b'{ "a" : 1 }'), ""),
        (
            {"sha256": content_hash(b'{"a": 1}')},
            answer(200, {"a": 2}),
            "its content differs from what the agent wrote",
        ),
        ({"sha256": "x", "exists": False}, answer(404), ""),
        ({"sha256": "x", "exists": False}, answer(200), "it exists again"),
    ],
    ids=[
        "weak-equals-strong",
        "etag-changed",
        "gone",
        "json-as-json",
        "content-changed",
        "still-absent",
        "exists-again",
    ],
)
def test_drift(after: dict[str, Any], now: UpstreamResponse, changed: str) -> None:
    assert changed_since(now, after) == changed


@pytest.mark.parametrize(
    ("now", "sent", "by_server"),
    [
        ("", "old", False),  # the undo's value came out empty: the server did not take it
        (None, "old", False),
        (7, 5, True),  # a counter the server moves on every write
        ("2026-01-02", "2026-01-01", True),  # a timestamp
        ("", "", True),  # empty before too: nothing blanked
    ],
)
def test_a_value_the_undo_sent_that_now_reads_empty_is_not_set_by_the_server(
    now: Any, sent: Any, by_server: bool
) -> None:
    diff = compare.FieldDiff(("node", "value"), "changed", now)
    server, not_restored = compare.server_set([diff], {"node": {"value": sent}}, [])
    assert (server == [diff], not_restored == [diff]) == (by_server, not by_server)
