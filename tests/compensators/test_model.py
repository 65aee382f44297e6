"""The journal's forms: inverse request bodies round-trip exactly; hashes ignore JSON layout."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from undoproxy.compensators.model import (
    Snapshot,
    content_hash,
    encode_body,
    inverse_request,
)

FORM = "application/x-www-form-urlencoded"

BODIES: list[Any] = [
    pytest.param(
        b"\x00\x01\xfe\xff binary \r\n", b"\x00\x01\xfe\xff binary \r\n", None, id="bytes"
    ),
    pytest.param(b"", b"", None, id="empty-bytes"),
    pytest.param(
        b'{ "b": 1,\n "a": 2 }', b'{ "b": 1,\n "a": 2 }', None, id="json-bytes-kept-as-written"
    ),
    pytest.param(
        "caf\u00e9 \u2713", "caf\u00e9 \u2713".encode(), "text/plain; charset=utf-8", id="text"
    ),
    pytest.param(
        {"name": "Z\u00fcrich", "tags": ["a", 1, None, True], "n": 1.5},
        None,
        "application/json",
        id="object",
    ),
    pytest.param([1, {"a": []}], None, "application/json", id="list"),
    pytest.param(0, b"0", "application/json", id="zero"),
    pytest.param(False, b"false", "application/json", id="false"),
]


@pytest.mark.parametrize(("value", "raw", "content_type"), BODIES)
def test_encode_body_round_trips(value: Any, raw: bytes | None, content_type: str | None) -> None:
    body_b64, ctype = encode_body(value)
    assert body_b64 is not None
    decoded = base64.b64decode(body_b64)
    if raw is None:  # JSON values: what comes back parses to the same value
        assert json.loads(decoded) == value
    else:
        assert decoded == raw
    assert ctype == content_type


def test_no_body_is_no_body() -> None:
    assert encode_body(None) == (None, None)
    assert inverse_request("DELETE", "https://api.test/items/7") == {
        "method": "DELETE",
        "url": "https://api.test/items/7",
        "body_b64": None,
        "content_type": None,
    }


@pytest.mark.parametrize(("value", "raw", "content_type"), BODIES)
def test_inverse_request_carries_the_exact_body(
    value: Any, raw: bytes | None, content_type: str | None
) -> None:
    out = inverse_request("PUT", "https://api.test/items/7", value)
    decoded = base64.b64decode(out["body_b64"])
    if raw is None:
        assert json.loads(decoded) == value
    else:
        assert decoded == raw
    assert out["content_type"] == content_type
    assert "headers" not in out
    json.dumps(out)  # the record is JSON-safe, as the journal stores it


def test_inverse_request_explicit_content_type_and_headers() -> None:
    out = inverse_request(
        "POST", "https://api.test/refunds", "charge=ch_1", FORM, headers={"X-Undo": "1"}
    )
    assert out["content_type"] == FORM
    assert out["headers"] == {"X-Undo": "1"}
    assert base64.b64decode(out["body_b64"]) == b"charge=ch_1"


SAME: list[Any] = [
    pytest.param(b'{"a":1,"b":[1,2]}', b'{\n  "b": [1, 2],\n  "a": 1\n}\n', id="layout-and-order"),
    pytest.param(b'{"a":{"y":1,"x":2}}', b'{"a": {"x": 2, "y": 1}}', id="nested-key-order"),
    pytest.param(b'{"s":"\\u00e9"}', '{"s":"\u00e9"}'.encode(), id="unicode-escapes"),
    pytest.param(b"[1, 2]", b"[1,2]", id="list-layout"),
    pytest.param(b"", None, id="empty-is-none"),
    pytest.param(b"plain text", b"plain text", id="same-bytes"),
]
DIFFERENT: list[Any] = [
    pytest.param(b'{"a":1}', b'{"a":2}', id="value"),
    pytest.param(b'{"a":1}', b'{"a":1,"b":null}', id="added-field"),
    pytest.param(b"[1,2]", b"[2,1]", id="list-order"),
    pytest.param(b'{"a":1}', b'{"a":"1"}', id="type"),
    pytest.param(b"plain text", b"plain text ", id="text-bytes"),
]


@pytest.mark.parametrize(("one", "other"), SAME)
def test_content_hash_ignores_json_formatting(one: bytes, other: bytes | None) -> None:
    assert content_hash(one) == content_hash(other)


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_content_hash_sees_real_changes(one: bytes, other: bytes) -> None:
    assert content_hash(one) != content_hash(other)


@pytest.mark.parametrize(
    "snap",
    [
        Snapshot(
            "https://api.test/items/7",
            200,
            b'{ "id": 7,\n "name": "seven" }\xff',
            etag='"v1"',
            last_modified="Wed, 21 Oct 2015 07:28:00 GMT",
            content_type="application/json",
        ),
        Snapshot("https://api.test/items/8", 404),
    ],
    ids=["existed", "absent"],
)
def test_snapshot_round_trips_through_the_journal(snap: Snapshot) -> None:
    stored = json.loads(json.dumps(snap.to_json()))
    assert Snapshot.from_json(stored) == snap
    assert stored["length"] == len(snap.body)


@pytest.mark.parametrize(
    ("status", "existed"), [(200, True), (204, True), (404, False), (410, False)]
)
def test_snapshot_existed(status: int, existed: bool) -> None:
    assert Snapshot("https://api.test/items/7", status).existed is existed
