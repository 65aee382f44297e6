"""The slack pack's compensators as pure functions: fields from JSON or form bodies, `ok: false`
answers, snapshots read with Slack's read methods, and the read-backs."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.compensators.helpers import run, sent_json, snapshot, step
from undoproxy.compensators.readback import differences

API = "https://slack.com/api"


def _build(name: str, method: str, body: Any, response: Any, *, snap: Any = None) -> dict[str, Any]:
    rule = f"match: {{method: POST}}\ncompensate: {name}" + ("\nsnapshot: true" if snap else "")
    taken = snapshot(f"{API}/conversations.info", 200, snap) if snap is not None else None
    raw = urlencode(body).encode() if isinstance(body, dict) and body.pop("_form", False) else body
    p, f = step(rule, "POST", f"{API}/{method}", raw, snap=taken)
    return run(p, f, 200, response)


INFO = {"ok": True, "channel": {"id": "C1", "topic": {"value": "old"}, "purpose": {"value": ""}}}


@pytest.mark.parametrize("form", [True, False], ids=["form", "json"])
def test_a_topic_is_set_back_from_a_form_or_json_call(form: bool) -> None:
    body = {"channel": "C1", "topic": "new", "_form": form}
    comp = _build("slack.restore-topic", "conversations.setTopic", body, {"ok": True}, snap=INFO)
    assert sent_json(comp)["body"] == {"channel": "C1", "topic": "old"}
    assert (comp["url"], comp["expect_ok"], comp["repeatable"]) == (
        f"{API}/conversations.setTopic",
        True,
        True,
    )
    assert comp["readback"]["url"] == f"{API}/conversations.info?channel=C1"
    assert differences(comp["readback"]["expect"], INFO) == []
    now = json.loads(json.dumps(INFO))
    now["channel"]["topic"]["value"] = "new"
    assert differences(comp["readback"]["expect"], now) == ["channel.topic.value is not as before"]


def test_a_snapshot_slack_refused_leaves_the_prior_value_unknown() -> None:
    refused = {"ok": False, "error": "not_authed"}
    body = {"channel": "C1", "purpose": "x"}
    comp = _build(
        "slack.restore-purpose", "conversations.setPurpose", body, {"ok": True}, snap=refused
    )
    assert "could not be read before" in comp["reason"]


def test_an_invite_answered_ok_false_is_still_undone_from_the_members_before() -> None:
    # `force` invites the valid users of a list and answers ok: false for the rest: the
    # answer is no evidence that nobody was invited.
    members = {"ok": True, "members": ["U1"]}
    body = {"channel": "C1", "users": "U2,UBAD"}
    answer = {"ok": False, "error": "user_not_found", "errors": [{"user": "UBAD"}]}
    comp = _build("slack.kick-invited", "conversations.invite", body, answer, snap=members)
    assert "noop" not in comp
    kicks = [sent_json(comp)["body"]] + [sent_json(r)["body"] for r in comp["then"]]
    assert kicks == [{"channel": "C1", "user": "U2"}, {"channel": "C1", "user": "UBAD"}]


def test_members_over_one_page_leave_an_invite_irreversible() -> None:
    # A user on the second page was a member all along: kicking them would be a new harm.
    members = {"ok": True, "members": ["U1"], "response_metadata": {"next_cursor": "dXNlcjo"}}
    body = {"channel": "C1", "users": "U2"}
    comp = _build("slack.kick-invited", "conversations.invite", body, {"ok": True}, snap=members)
    assert "more members than one page" in comp["reason"]


def test_members_read_back_page_by_page() -> None:
    members = {"ok": True, "members": ["U1"]}
    body = {"channel": "C1", "users": "U2"}
    comp = _build("slack.kick-invited", "conversations.invite", body, {"ok": True}, snap=members)
    assert comp["readback"]["pages"] == {
        "cursor": ["response_metadata", "next_cursor"],
        "param": "cursor",
    }


def test_only_users_who_were_not_members_are_kicked() -> None:
    members = {"ok": True, "members": ["U1", "U2"]}
    body = {"channel": "C1", "users": "U2,U3,U4"}
    comp = _build("slack.kick-invited", "conversations.invite", body, {"ok": True}, snap=members)
    kicks = [sent_json(comp)["body"]] + [sent_json(r)["body"] for r in comp["then"]]
    assert kicks == [{"channel": "C1", "user": "U3"}, {"channel": "C1", "user": "U4"}]
    assert comp["ok_errors"] == ["not_in_channel"]
    after = {"ok": True, "members": ["U1", "U2", "U4"]}
    assert differences(comp["readback"]["expect"], after) == [
        "members.* still has what the step added"
    ]


def test_a_message_update_is_undone_with_the_text_and_blocks_read_before() -> None:
    history = {
        "ok": True,
        "messages": [{"ts": "1.5", "text": "before", "blocks": [{"type": "divider"}]}],
    }
    body = {"channel": "C1", "ts": "1.5", "text": "after"}
    comp = _build("slack.restore-message", "chat.update", body, {"ok": True}, snap=history)
    assert sent_json(comp)["body"] == {
        "channel": "C1",
        "ts": "1.5",
        "text": "before",
        "blocks": [{"type": "divider"}],
    }
    assert differences(comp["readback"]["expect"], history) == []


def test_a_message_the_snapshot_did_not_find_is_irreversible() -> None:
    history = {"ok": True, "messages": []}
    body = {"channel": "C1", "ts": "1.5", "text": "after"}
    comp = _build("slack.restore-message", "chat.update", body, {"ok": True}, snap=history)
    assert "could not be read before the update" in comp["reason"]


@pytest.mark.parametrize(
    ("name", "method", "body", "response", "request_"),
    [
        (
            "slack.delete-scheduled",
            "chat.scheduleMessage",
            {"channel": "C1", "text": "t", "post_at": 9},
            {"ok": True, "channel": "C1", "scheduled_message_id": "Q1"},
            ("chat.deleteScheduledMessage", {"channel": "C1", "scheduled_message_id": "Q1"}),
        ),
        (
            "slack.remove-reaction",
            "reactions.add",
            {"channel": "C1", "name": "tada", "timestamp": "1.5"},
            {"ok": True},
            ("reactions.remove", {"channel": "C1", "name": "tada", "timestamp": "1.5"}),
        ),
        (
            "slack.remove-pin",
            "pins.add",
            {"channel": "C1", "timestamp": "1.5"},
            {"ok": True},
            ("pins.remove", {"channel": "C1", "timestamp": "1.5"}),
        ),
        (
            "slack.archive-channel",
            "conversations.create",
            {"name": "x"},
            {"ok": True, "channel": {"id": "C9"}},
            ("conversations.archive", {"channel": "C9"}),
        ),
    ],
)
def test_each_row_builds_its_slack_call(
    name: str, method: str, body: Any, response: Any, request_: tuple[str, Any]
) -> None:
    comp = _build(name, method, {**body, "_form": True}, response)
    assert (comp["url"], sent_json(comp)["body"]) == (f"{API}/{request_[0]}", request_[1])
    assert comp["expect_ok"] is True


@pytest.mark.parametrize(
    "name",
    [
        "slack.delete-scheduled",
        "slack.remove-reaction",
        "slack.restore-topic",
    ],
)
def test_a_call_slack_answered_ok_false_has_nothing_to_undo(name: str) -> None:
    comp = _build(
        name, "any.method", {"channel": "C1"}, {"ok": False, "error": "channel_not_found"}
    )
    assert "ok: false (channel_not_found)" in comp["noop"]
