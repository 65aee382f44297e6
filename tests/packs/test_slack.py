"""The slack pack, as an agent meets it: slack_sdk's WebClient through a real `undoproxy run`
to a stateful fake Slack (HTTP 200 with `ok: false` for errors, JSON and form arguments), then
a rollback, then the fake's state compared with the state before the session. One test per row
of the contract's Slack table, and reads by method name."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from tests.support import fake_slack
from tests.support.fake_github import pack_config
from tests.support.fake_slack import TOKEN, SlackState
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def state() -> SlackState:
    return SlackState()


@pytest.fixture(scope="module")
def fake(state: SlackState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = fake_slack.serve(state, upstream_cert)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, fake: ThreadedServer) -> Iterator[Undoproxy]:
    instance = Undoproxy(
        tmp_path_factory.mktemp("slack-pack"), pack_config("slack", fake.port)
    ).start()
    yield instance
    instance.stop()


class Agent:
    """One session's WebClient through undoproxy, with a channel of its own."""

    def __init__(self, up: Undoproxy, fake: ThreadedServer, state: SlackState) -> None:
        self.up, self.state = up, state
        self.session = f"sl-{uuid.uuid4().hex[:8]}"
        self.channel = state.channel(f"C{uuid.uuid4().hex[:8].upper()}", members=["UBOT", "U1"])
        self.client = WebClient(
            token=TOKEN,
            base_url=f"{fake.base_url}/api/",
            proxy=up.proxy_url(self.session),
            ssl=ssl.create_default_context(cafile=up.ca_bundle),
        )

    def dump(self) -> dict[str, Any]:
        return self.state.dump()

    def steps(self) -> list[dict[str, Any]]:
        return list(self.up.api("GET", f"/api/sessions/{self.session}").json()["steps"])

    def rollback(self) -> dict[str, Any]:
        r = self.up.api("POST", f"/api/sessions/{self.session}/rollback", json={})
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.fixture
def agent(up: Undoproxy, fake: ThreadedServer, state: SlackState) -> Agent:
    return Agent(up, fake, state)


def _statuses(report: dict[str, Any]) -> list[str]:
    return [s["status"] for s in report["steps"]]


def _posted(agent: Agent, text: str = "before", **extra: Any) -> str:
    """A message that was in the channel before the session."""
    ts = agent.state.ts()
    message = {"type": "message", "user": "U1", "ts": ts, "text": text, **extra}
    agent.state.channels[agent.channel]["messages"].append(message)
    return ts


def _topic(agent: Agent) -> None:
    channel = agent.state.channels[agent.channel]
    channel["topic"]["value"] = "the old topic"
    channel["purpose"]["value"] = "the old purpose"


ROWS: list[Any] = [
    pytest.param(
        lambda a: None,
        lambda a, _: a.client.chat_postMessage(channel=a.channel, text="hi from the agent"),
        "slack/post-message",
        id="chat.postMessage",
    ),
    pytest.param(
        lambda a: _posted(a, "the original", blocks=[{"type": "section", "block_id": "b"}]),
        lambda a, ts: a.client.chat_update(
            channel=a.channel, ts=ts, text="edited by the agent", blocks=[]
        ),
        "slack/update-message",
        id="chat.update",
    ),
    pytest.param(
        lambda a: None,
        lambda a, _: a.client.chat_scheduleMessage(
            channel=a.channel, text="later", post_at=1900000000
        ),
        "slack/schedule-message",
        id="chat.scheduleMessage",
    ),
    pytest.param(
        _posted,
        lambda a, ts: a.client.reactions_add(channel=a.channel, name="tada", timestamp=ts),
        "slack/add-reaction",
        id="reactions.add",
    ),
    pytest.param(
        _posted,
        lambda a, ts: a.client.pins_add(channel=a.channel, timestamp=ts),
        "slack/add-pin",
        id="pins.add",
    ),
    pytest.param(
        lambda a: None,
        lambda a, _: a.client.conversations_invite(channel=a.channel, users=["U2", "U3"]),
        "slack/invite",
        id="conversations.invite",
    ),
    pytest.param(
        _topic,
        lambda a, _: a.client.conversations_setTopic(channel=a.channel, topic="agent's topic"),
        "slack/set-topic",
        id="conversations.setTopic",
    ),
    pytest.param(
        _topic,
        lambda a, _: a.client.conversations_setPurpose(channel=a.channel, purpose="agent's"),
        "slack/set-purpose",
        id="conversations.setPurpose",
    ),
]


@pytest.mark.parametrize(("seed", "act", "rule"), ROWS)
def test_rollback_puts_the_workspace_back(
    agent: Agent, seed: Callable[[Agent], Any], act: Callable[[Agent, Any], Any], rule: str
) -> None:
    seeded = seed(agent)
    before = agent.dump()
    act(agent, seeded)
    assert agent.dump() != before
    mutations = [s for s in agent.steps() if s["kind"] == "mutation"]
    assert [s["rule"] for s in mutations] == [rule]
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert "read back" in report["steps"][0]["detail"]
    assert report["state"] == "rolled_back"
    assert agent.dump() == before


def test_a_created_channel_is_archived(agent: Agent) -> None:
    made = agent.client.conversations_create(name=f"agent-{agent.session}")
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report
    assert agent.state.channels[made["channel"]["id"]]["is_archived"] is True


def test_reads_by_method_name_are_reads_whatever_the_http_method(agent: Agent) -> None:
    _posted(agent)
    agent.client.conversations_history(channel=agent.channel)  # GET
    agent.client.api_call("conversations.members", params={"channel": agent.channel})  # POST
    agent.client.api_call("conversations.info", json={"channel": agent.channel})  # POST, JSON
    agent.client.auth_test()
    agent.client.api_call("users.lookupByEmail", params={"email": "a@example.test"})
    steps = agent.steps()
    assert [s["kind"] for s in steps] == ["read"] * 5, steps
    report = agent.rollback()
    assert report["steps"] == []


def test_a_call_slack_answered_ok_false_has_nothing_to_undo(agent: Agent) -> None:
    with pytest.raises(SlackApiError):
        agent.client.chat_postMessage(channel="CNOWHERE", text="lost")
    # The journal says what Slack said: the call failed, whatever its HTTP 200.
    [step] = agent.up.api("GET", f"/api/sessions/{agent.session}").json()["steps"]
    assert step["status"] == "failed" and step["response_status"] == 200
    assert "channel_not_found" in step["error"]
    report = agent.rollback()
    assert _statuses(report) == ["skipped"], report
    assert "Slack answered ok: false (channel_not_found)" in report["steps"][0]["detail"]
    assert report["steps"][0]["evidence"]["journal"] == "recorded"
    assert report["state"] == "rolled_back"


def test_a_message_already_deleted_by_hand_counts_as_undone(agent: Agent) -> None:
    agent.client.chat_postMessage(channel=agent.channel, text="oops")
    agent.state.channels[agent.channel]["messages"].clear()  # a person deleted it meanwhile
    report = agent.rollback()
    assert _statuses(report) == ["compensated"], report


def test_a_deleted_message_is_held_and_denied_changes_nothing(agent: Agent) -> None:
    ts = _posted(agent)
    before = agent.dump()
    call = in_thread(lambda: agent.client.chat_delete(channel=agent.channel, ts=ts))
    pending = wait_pending(agent.up, agent.session)
    assert (pending["rule"], pending["risk"]) == ("slack/delete-message", "high")
    decide(agent.up, pending["id"], "deny", reason="no")
    with pytest.raises(Exception):  # noqa: B017 - slack_sdk reads the 403 as an API error
        call.result(30)
    assert agent.dump() == before
    assert _statuses(agent.rollback()) == ["skipped"]


def test_an_undo_slack_refused_is_failed_never_compensated(agent: Agent) -> None:
    agent.client.chat_postMessage(channel=agent.channel, text="hi")
    agent.state.refuse["chat.delete"] = "cant_delete_message"
    try:
        report = agent.rollback()
    finally:
        agent.state.refuse.clear()
    assert _statuses(report) == ["failed"], report
    assert "cant_delete_message" in report["steps"][0]["detail"]
    report = agent.rollback()  # refused (ok: false) is proof it was not applied: sent again
    assert _statuses(report) == ["compensated"], report
    assert agent.state.channels[agent.channel]["messages"] == []


def test_slack_sdk_reads_the_fake_directly(
    fake: ThreadedServer, state: SlackState, upstream_cert: tuple[Path, Path]
) -> None:
    """The fake is one slack_sdk can parse: the same calls without undoproxy."""
    channel = state.channel("CDIRECT")
    client = WebClient(
        token=TOKEN,
        base_url=f"{fake.base_url}/api/",
        ssl=ssl.create_default_context(cafile=str(upstream_cert[0])),
    )
    posted = client.chat_postMessage(channel=channel, text="x")
    assert client.conversations_history(channel=channel)["messages"][0]["ts"] == posted["ts"]
    with pytest.raises(SlackApiError) as refused:
        client.chat_delete(channel=channel, ts="0.0")
    assert refused.value.response["error"] == "message_not_found"


def test_a_kick_read_back_reads_every_page_of_members(agent: Agent) -> None:
    # The channel's members span several pages by the time of the rollback; one invited user
    # stays (the kick is answered ok and changes nothing). A read-back of the first page
    # alone would show them all gone.
    agent.client.conversations_invite(channel=agent.channel, users=["U2", "U3"])
    agent.state.kept_on_kick.add("U3")
    agent.state.page_size = 1  # the kicked user is found on the third page, not the first
    try:
        report = agent.rollback()
    finally:
        agent.state.page_size = 1000
        agent.state.kept_on_kick.discard("U3")
    assert _statuses(report) == ["failed"], report
    assert "members.* still has what the step added" in report["steps"][0]["detail"]
    assert report["state"] == "rollback_incomplete"


def test_an_invite_to_a_channel_over_one_page_of_members_is_irreversible(agent: Agent) -> None:
    # Who was a member before cannot be told from the first page: kicking a member of the
    # second page, there all along, would be a new harm; nothing is guessed.
    agent.state.page_size = 1
    try:
        agent.client.conversations_invite(channel=agent.channel, users=["U2"])
    finally:
        agent.state.page_size = 1000
    report = agent.rollback()
    assert _statuses(report) == ["irreversible"], report
    assert "more members than one page" in report["steps"][0]["detail"]
    assert "U2" in agent.state.channels[agent.channel]["members"]  # nobody was kicked
