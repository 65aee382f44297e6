"""Read-then-undo compensations (compensators/rpc.py) and RPC read-backs (readback.py): pure
tables, no network."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from undoproxy.compensators import readback, rpc
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, Snapshot
from undoproxy.compensators.record import CompensationRecord
from undoproxy.errors import ConfigErrors, Location
from undoproxy.rules import parse_rules

SPEC: dict[str, Any] = {
    "read": {
        "method": "POST",
        "url": "/v3/kv/range",
        "body": {"key": "${request.body.key}"},
        "absent": {"$.kvs": {"exists": False}},
        "compare": ["$.kvs[*].value"],
    },
    "undo": {
        "method": "POST",
        "url": "/v3/kv/put",
        "body": {"key": "${request.body.key}", "value": "${snapshot.body.kvs[0].value}"},
        "repeatable": True,
    },
    "undo_absent": {
        "method": "POST",
        "url": "/v3/kv/deleterange",
        "body": {"key": "${request.body.key}"},
    },
}
URL = "http://kv.test:2379/v3/kv/put"


def facts(read: dict[str, Any] | None, *, status: int = 200) -> Facts:
    f = Facts("POST", URL, request_body=json.dumps({"key": "Zm9v", "value": "YmFy"}).encode())
    if read is not None:
        f.reads["rpc"] = Snapshot(
            "http://kv.test:2379/v3/kv/range", status, json.dumps(read).encode()
        )
    f.response_status = 200
    return f


def body(out: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(out["body_b64"]))


def test_the_read_is_rendered_from_the_request_before_it_is_forwarded() -> None:
    (read,) = rpc.reads(SPEC, facts(None))
    assert (read.method, read.url) == ("POST", "http://kv.test:2379/v3/kv/range")
    assert json.loads(read.body) == {"key": "Zm9v"}
    assert read.headers == {"Content-Type": "application/json"}
    assert read.absent_when == {"status": [200, 201, 204], "body": {"$.kvs": {"exists": False}}}


@pytest.mark.parametrize(
    ("read", "undo_url", "undo_body", "expect"),
    [
        (
            {"kvs": [{"key": "Zm9v", "value": "b2xk", "mod_revision": "3"}]},
            "http://kv.test:2379/v3/kv/put",
            {"key": "Zm9v", "value": "b2xk"},
            [readback.same_digest(["kvs", "*", "value"], ["b2xk"])],
        ),
        ({"header": {}}, "http://kv.test:2379/v3/kv/deleterange", {"key": "Zm9v"}, None),
    ],
)
def test_the_undo_follows_what_the_read_found(
    read: dict[str, Any], undo_url: str, undo_body: Any, expect: Any
) -> None:
    f = facts(read)
    f.reads["rpc"].absent_answer = "" if "kvs" in read else "no such thing"
    out = rpc.build(SPEC, f)
    assert (out["method"], out["url"], body(out)) == ("POST", undo_url, undo_body)
    spec = out["readback"]
    assert (spec["method"], spec["url"]) == ("POST", "http://kv.test:2379/v3/kv/range")
    assert spec.get("expect") == expect and spec.get("gone", False) == (expect is None)
    assert spec["left_paths"] == [["kvs", "*", "value"]] and out["needs_after_read"]


def test_absent_without_undo_absent_is_nothing_to_undo_from_the_read() -> None:
    spec = {k: v for k, v in SPEC.items() if k != "undo_absent"}
    f = facts({"header": {}})
    f.reads["rpc"].absent_answer = "no such thing"
    with pytest.raises(NothingToUndo) as caught:
        rpc.build(spec, f)
    assert caught.value.kind == "read"


@pytest.mark.parametrize(
    ("reads", "message"),
    [({}, "was not made"), ({"rpc": Snapshot("u", 200, b"not json")}, "cannot be filled in")],
)
def test_without_a_usable_read_it_is_irreversible(reads: dict[str, Snapshot], message: str) -> None:
    f = facts(None)
    f.reads.update(reads)
    with pytest.raises(Irreversible, match=message):
        rpc.build(SPEC, f)


def test_a_form_body_is_encoded_value_by_value() -> None:
    spec = {
        "read": {"method": "GET"},
        "undo": {"method": "PUT", "form": {"value": "${snapshot.body.node.value}"}},
    }
    f = Facts("PUT", "http://etcd.test/v2/keys/a", request_body=b"value=new")
    f.reads["rpc"] = Snapshot(f.url, 200, json.dumps({"node": {"value": "a&b=c d"}}).encode())
    out = rpc.build(spec, f)
    assert base64.b64decode(out["body_b64"]) == b"value=a%26b%3Dc+d"
    assert out["content_type"] == "application/x-www-form-urlencoded"
    assert out["url"] == "http://etcd.test/v2/keys/a"  # no url: the request's own


@pytest.mark.parametrize(
    ("spec", "status", "body", "absent"),
    [
        (
            readback.absent_when([400], {"$.__type": {"regex": "NotFound"}}),
            400,
            {"__type": "x#ResourceNotFoundException"},
            True,
        ),
        (
            readback.absent_when([400], {"$.__type": {"regex": "NotFound"}}),
            400,
            {"__type": "AccessDeniedException"},
            False,
        ),
        (
            readback.absent_when([400], {"$.__type": {"regex": "NotFound"}}),
            500,
            {"__type": "NotFound"},
            False,
        ),
        (readback.absent_when([200], {"$.kvs": {"exists": False}}), 200, {"header": {}}, True),
        (readback.absent_when([200], {"$.kvs": {"exists": False}}), 200, {"kvs": []}, False),
        (None, 400, {"__type": "NotFound"}, False),
    ],
)
def test_an_api_s_no_such_thing_answer_is_absence_only_as_declared(
    spec: Any, status: int, body: Any, absent: bool
) -> None:
    assert bool(readback.absent_answer(spec, status, json.dumps(body).encode())) == absent


@pytest.mark.parametrize(
    ("doc", "differs"),
    [({"SecretString": "s3cret"}, False), ({"SecretString": "other"}, True), ({}, True)],
)
def test_a_digest_check_keeps_no_value_and_still_compares(doc: Any, differs: bool) -> None:
    check = readback.same_digest(["SecretString"], "s3cret")
    assert "s3cret" not in json.dumps(check)
    assert bool(readback.differences([check], doc)) == differs


def test_what_a_step_left_becomes_the_read_back_s_left_checks() -> None:
    spec = {"url": "u", "method": "POST", "left_paths": [["kvs", "*", "value"]]}
    after = rpc.left_after(spec, False, json.dumps({"kvs": [{"value": "bmV3"}]}).encode())
    record = CompensationRecord.of({"readback": spec, "after": after})
    assert record.readback is not None and record.readback["left"] == after["left"]
    gone = CompensationRecord.of({"readback": spec, "after": rpc.left_after(spec, True, b"")})
    assert gone.readback is not None and gone.readback["left_gone"] is True


@pytest.mark.parametrize(
    ("compensate", "message"),
    [
        ({"read": {"url": "/r"}}, "needs an undo"),
        (
            {"read": {"url": "/r", "compare": ["$..x"]}, "undo": {"method": "PUT"}},
            "simple JSONPaths",
        ),
        (
            {"read": {"url": "/r", "absent": {"status": 999}}, "undo": {"method": "PUT"}},
            "status codes",
        ),
        ({"read": {"url": "/r", "bogus": 1}, "undo": {"method": "PUT"}}, "unknown key 'bogus'"),
        ({"read": {"url": "/r"}, "undo": {"method": "FETCH"}}, "needs a method"),
        (
            {"read": {"url": "/r/${response.body.id}"}, "undo": {"method": "PUT"}},
            "only request.body",
        ),
        (
            {"read": {"url": "/r"}, "undo": {"method": "PUT", "form": {"a": 1}, "body": {}}},
            "instead of a body",
        ),
    ],
)
def test_a_written_out_rpc_undo_is_checked_when_the_rules_load(
    compensate: dict[str, Any], message: str
) -> None:
    rules = [{"name": "r", "match": {"method": "POST", "path": "/x"}, "compensate": compensate}]
    with pytest.raises(ConfigErrors, match=message):
        parse_rules(rules, None, base_dir=Path("."), where=Location("config.yaml", 1))
