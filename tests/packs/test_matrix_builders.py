"""The matrix pack's pure compensators: the inverse request and its read-back, from plain data."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.compensators.helpers import sent
from undoproxy.compensators.matrix import REASON, redact_event, restore_state, txn_for
from undoproxy.compensators.model import Facts, Irreversible, Snapshot

HS = "https://matrix.example.test/_matrix/client/v3/rooms/%21r%3Aexample.test"


def _send(response: Any) -> Facts:
    body = json.dumps({"msgtype": "m.text", "body": "hi"}).encode()
    return Facts(
        "PUT",
        f"{HS}/send/m.room.message/t1?access_token=%5Bredacted%5D",
        request_body=body,
        response_status=200,
        response_body=json.dumps(response).encode(),
    )


def test_send_is_undone_by_a_redaction_with_a_transaction_id_derived_from_the_event() -> None:
    out = redact_event(_send({"event_id": "$ev1/x"}))
    assert sent(out)["method"] == "PUT"
    assert sent(out)["url"] == f"{HS}/redact/%24ev1%2Fx/{txn_for('$ev1/x')}"
    assert json.loads(sent(out)["body"]) == {"reason": REASON}
    assert txn_for("$ev1/x") == redact_event(_send({"event_id": "$ev1/x"}))["url"].rsplit("/")[-1]
    assert txn_for("$ev1/x") != txn_for("$ev2")
    assert out["readback"]["url"] == f"{HS}/event/%24ev1%2Fx"
    assert out["readback"]["left"] == [
        {"path": ["content"], "equals": {"msgtype": "m.text", "body": "hi"}}
    ]


def test_send_without_an_event_id_is_irreversible() -> None:
    with pytest.raises(Irreversible, match="no 'event_id'"):
        redact_event(_send({"errcode": "M_UNKNOWN"}))


def _state(snapshot: Snapshot | None) -> Facts:
    return Facts(
        "PUT",
        f"{HS}/state/m.room.topic/",
        request_body=b'{"topic": "new"}',
        snapshot=snapshot,
        response_status=200,
        response_body=b'{"event_id": "$s"}',
    )


def test_state_is_put_back_from_the_snapshot_and_read_back_whole() -> None:
    snap = Snapshot(f"{HS}/state/m.room.topic/", 200, b'{"topic": "old"}')
    out = restore_state(_state(snap))
    assert (sent(out)["method"], sent(out)["url"]) == ("PUT", f"{HS}/state/m.room.topic/")
    assert json.loads(sent(out)["body"]) == {"topic": "old"}
    assert out["readback"]["expect"] == [{"path": [], "equals": {"topic": "old"}}]
    assert out["readback"]["left"] == [{"path": [], "equals": {"topic": "new"}}]


def test_state_that_did_not_exist_cannot_be_removed() -> None:
    with pytest.raises(Irreversible, match="Matrix cannot remove a state event"):
        restore_state(_state(Snapshot(f"{HS}/state/m.room.topic/", 404)))


def test_a_url_that_is_not_a_room_url_is_irreversible() -> None:
    facts = Facts("PUT", "https://m.test/_matrix/client/v3/profile/@a:b/displayname")
    with pytest.raises(Irreversible, match="not a Matrix /rooms/"):
        restore_state(facts)
