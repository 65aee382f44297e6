"""Slack Web API compensators: `https://slack.com/api/{method}`, fields as JSON or form.

Slack answers errors with HTTP 200 and `"ok": false`: a step whose answer says so changed
nothing (NothingToUndo), and every compensation is sent with `expect_ok`, so one Slack refuses
is `failed`, never `compensated`. `ok_errors` lists the refusals that mean the undo already
holds (the message is already gone). Each read-back is a Slack read method by GET.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urljoin

from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo
from undoproxy.compensators.model import inverse_request as request
from undoproxy.compensators.readback import excludes, expect, left_by, readback
from undoproxy.compensators.responses import need, prior, sent

OK = expect(["ok"], True)
# How Slack pages a listing: `response_metadata.next_cursor`, sent back as `cursor`.
CURSOR_PAGES = {"cursor": ["response_metadata", "next_cursor"], "param": "cursor"}


def _answered(facts: Facts) -> dict[str, Any]:
    """The response; NothingToUndo when Slack said `ok: false` (nothing happened)."""
    body = facts.response_json
    if isinstance(body, dict) and body.get("ok") is False:
        raise NothingToUndo(
            f"Slack answered ok: false ({body.get('error', 'no error given')}): "
            "the call changed nothing",
            "answer",
        )
    return body if isinstance(body, dict) else {}


def _asked(facts: Facts, name: str) -> str:
    value = sent(facts).get(name)
    if value in (None, ""):
        raise Irreversible(f"the request has no {name!r}, so the call cannot be undone")
    return str(value)


def _api(facts: Facts, method: str, **query: str) -> str:
    url = urljoin(facts.url, f"/api/{method}")
    return f"{url}?{urlencode(query)}" if query else url


def _call(
    facts: Facts, method: str, body: dict[str, Any], ok_errors: tuple[str, ...] = ()
) -> dict[str, Any]:
    out = request("POST", _api(facts, method), body)
    out["expect_ok"] = True
    out["repeatable"] = True  # every undo here leaves the same state when sent twice
    if ok_errors:
        out["ok_errors"] = list(ok_errors)
    return out


def delete_message(facts: Facts) -> dict[str, Any]:
    """chat.delete the message chat.postMessage sent."""
    body = _answered(facts)
    channel, ts = need(facts, "channel"), need(facts, "ts")
    out = _call(facts, "chat.delete", {"channel": channel, "ts": ts}, ("message_not_found",))
    message = body.get("message") if isinstance(body.get("message"), dict) else {}
    thread = message.get("thread_ts") if isinstance(message, dict) else None
    if thread and thread != ts:  # a reply: it lives in its thread, not the channel's history
        where = _api(facts, "conversations.replies", channel=channel, ts=thread)
    else:
        where = _history(facts, channel, ts)
    out["readback"] = readback(where, OK, excludes(["messages", "*", "ts"], [ts]))
    return out


def _history(facts: Facts, channel: str, ts: str) -> str:
    """conversations.history narrowed to the one message `ts`."""
    return _api(
        facts,
        "conversations.history",
        channel=channel,
        latest=ts,
        oldest=ts,
        inclusive="true",
        limit="1",
    )


def restore_message(facts: Facts) -> dict[str, Any]:
    """chat.update the message back to the text (and blocks) read before the update."""
    _answered(facts)
    channel, ts = _asked(facts, "channel"), _asked(facts, "ts")
    snap = prior(facts)
    messages = snap.get("messages") if isinstance(snap, dict) else None
    found = [m for m in messages or [] if isinstance(m, dict) and m.get("ts") == ts]
    if not found or not isinstance(snap, dict) or snap.get("ok") is not True:
        raise Irreversible(
            "the message could not be read before the update, so its text is unknown"
        )
    before = found[0]
    body: dict[str, Any] = {"channel": channel, "ts": ts, "text": before.get("text", "")}
    checks = [OK, expect(["messages", 0, "text"], body["text"])]
    if "blocks" in before or "blocks" in sent(facts):
        body["blocks"] = before.get("blocks") or []
        checks.append(expect(["messages", 0, "blocks"], before.get("blocks")))
    out = _call(facts, "chat.update", body)
    out["readback"] = readback(_history(facts, channel, ts), *checks)
    answer = facts.response_json if isinstance(facts.response_json, dict) else {}
    stored = (
        answer.get("message", {}).get("text") if isinstance(answer.get("message"), dict) else None
    )
    stored = stored if isinstance(stored, str) else answer.get("text")
    if isinstance(stored, str):  # the text as Slack stored it: a later edit is someone else's
        out["readback"]["left"] = [expect(["messages", 0, "text"], stored)]
    return out


def delete_scheduled(facts: Facts) -> dict[str, Any]:
    """chat.deleteScheduledMessage the message chat.scheduleMessage scheduled."""
    _answered(facts)
    channel, scheduled = need(facts, "channel"), need(facts, "scheduled_message_id")
    out = _call(
        facts,
        "chat.deleteScheduledMessage",
        {"channel": channel, "scheduled_message_id": scheduled},
        ("invalid_scheduled_message_id",),
    )
    out["readback"] = readback(
        _api(facts, "chat.scheduledMessages.list", channel=channel),
        OK,
        excludes(["scheduled_messages", "*", "id"], [scheduled]),
    )
    return out


def remove_reaction(facts: Facts) -> dict[str, Any]:
    """reactions.remove the reaction reactions.add added."""
    _answered(facts)
    channel, name, ts = _asked(facts, "channel"), _asked(facts, "name"), _asked(facts, "timestamp")
    out = _call(
        facts,
        "reactions.remove",
        {"channel": channel, "name": name, "timestamp": ts},
        ("no_reaction",),
    )
    out["readback"] = readback(
        _api(facts, "reactions.get", channel=channel, timestamp=ts),
        OK,
        # reactions.get leaves `reactions` out when there are none: the message must be there
        excludes(["message", "reactions", "*", "name"], [name], within=["message"]),
    )
    return out


def remove_pin(facts: Facts) -> dict[str, Any]:
    """pins.remove the message pins.add pinned."""
    _answered(facts)
    channel, ts = _asked(facts, "channel"), _asked(facts, "timestamp")
    out = _call(facts, "pins.remove", {"channel": channel, "timestamp": ts}, ("no_pin",))
    out["readback"] = readback(
        _api(facts, "pins.list", channel=channel),
        OK,
        excludes(["items", "*", "message", "ts"], [ts]),
    )
    return out


def archive_channel(facts: Facts) -> dict[str, Any]:
    """conversations.archive the channel conversations.create made (Slack deletes none)."""
    body = _answered(facts)
    channel = need(facts, "id", body.get("channel"))
    out = _call(facts, "conversations.archive", {"channel": channel}, ("already_archived",))
    out["readback"] = readback(
        _api(facts, "conversations.info", channel=channel),
        OK,
        expect(["channel", "is_archived"], True),
    )
    return out


def kick_invited(facts: Facts) -> dict[str, Any]:
    """conversations.kick each user invited who was not a member before (snapshot, if any).

    Slack may answer `ok: false` and still have invited the valid users of a list (`force`),
    so the answer is not taken as "nothing happened": each kick of a user who is not in the
    channel is answered `not_in_channel`, and the read-back of the members decides."""
    channel = _asked(facts, "channel")
    users = [u.strip() for u in _asked(facts, "users").split(",") if u.strip()]
    snap = prior(facts) if facts.snapshot is not None else None
    if not isinstance(snap, dict) or snap.get("ok") is not True:
        raise Irreversible("the channel's members before the invite could not be read")
    if (snap.get("response_metadata") or {}).get("next_cursor"):
        # Kicking a user on the second page, who was a member all along, would be a new harm.
        raise Irreversible(
            "the channel had more members than one page of conversations.members shows, so "
            "which invited users were members before is unknown"
        )
    members = [str(m) for m in snap.get("members") or []]
    invited = [u for u in dict.fromkeys(users) if u not in members]
    if not invited:
        raise NothingToUndo("every user invited was a member of the channel before", "read")
    kicks = [
        _call(facts, "conversations.kick", {"channel": channel, "user": u}, ("not_in_channel",))
        for u in invited
    ]
    out = {**kicks[0], "then": kicks[1:]}
    out["readback"] = readback(
        _api(facts, "conversations.members", channel=channel, limit="1000"),
        OK,
        excludes(["members", "*"], invited),
    )
    out["readback"]["pages"] = CURSOR_PAGES  # a channel of over 1,000: every page is read
    return out


def _restore_channel_text(facts: Facts, field: str, method: str) -> dict[str, Any]:
    _answered(facts)
    channel = _asked(facts, "channel")
    snap = prior(facts)
    info = snap.get("channel") if isinstance(snap, dict) else None
    if not isinstance(info, dict) or snap.get("ok") is not True:
        raise Irreversible(f"the channel could not be read before, so its {field} is unknown")
    value = info.get(field)
    text = str(value.get("value", "")) if isinstance(value, dict) else ""
    out = _call(facts, method, {"channel": channel, field: text})
    out["readback"] = readback(
        _api(facts, "conversations.info", channel=channel),
        OK,
        expect(["channel", field, "value"], text),
    )
    # setTopic/setPurpose answer the channel as conversations.info shows it
    out["readback"]["left"] = left_by(
        facts.response_json, [expect(["channel", field, "value"], "")]
    )
    return out


def restore_topic(facts: Facts) -> dict[str, Any]:
    """conversations.setTopic the topic read before (conversations.info)."""
    return _restore_channel_text(facts, "topic", "conversations.setTopic")


def restore_purpose(facts: Facts) -> dict[str, Any]:
    """conversations.setPurpose the purpose read before (conversations.info)."""
    return _restore_channel_text(facts, "purpose", "conversations.setPurpose")


BUILDERS = {
    "slack.delete-message": delete_message,
    "slack.restore-message": restore_message,
    "slack.delete-scheduled": delete_scheduled,
    "slack.remove-reaction": remove_reaction,
    "slack.remove-pin": remove_pin,
    "slack.archive-channel": archive_channel,
    "slack.kick-invited": kick_invited,
    "slack.restore-topic": restore_topic,
    "slack.restore-purpose": restore_purpose,
}

DESCRIPTIONS = {
    "slack.delete-message": "chat.delete the message chat.postMessage sent",
    "slack.restore-message": "chat.update back the prior text and blocks (read before)",
    "slack.delete-scheduled": "chat.deleteScheduledMessage what chat.scheduleMessage scheduled",
    "slack.remove-reaction": "reactions.remove the reaction added",
    "slack.remove-pin": "pins.remove the pin added",
    "slack.archive-channel": "conversations.archive the channel created",
    "slack.kick-invited": "conversations.kick each user invited who was not a member before",
    "slack.restore-topic": "conversations.setTopic back the prior topic (read before)",
    "slack.restore-purpose": "conversations.setPurpose back the prior purpose (read before)",
}
