"""The matrix pack against a real homeserver (Synapse), the agent a real client (matrix-nio).

For each operation: the room's state before, the operation through `undoproxy run`, rollback,
then the room read straight from Synapse (without the proxy) as a user would check it: a
message sent is redacted (its content gone, `redacted_because` set), a state event is back to
its prior content, and what cannot be undone (state that did not exist before, a state
changed by someone else since) is reported so and left alone.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nio
import pytest
import requests

from tests.support.ci import skip_or_fail
from tests.support.proc import Undoproxy
from tests.support.synapse import Synapse, room, synapse_python
from undoproxy.compensators.matrix import txn_for


@pytest.fixture(scope="module")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    python = synapse_python()
    if python is None:
        skip_or_fail(
            "Synapse is not installed: `python3 -m venv .venv/synapse && "
            ".venv/synapse/bin/pip install matrix-synapse` (.ci/run does it)",
            module=True,
        )
    server = Synapse(python, tmp_path_factory.mktemp("synapse")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, synapse: Synapse) -> Iterator[Undoproxy]:
    # Every pack on, as deployed (the steps name the matrix rule that recognised them).
    config: dict[str, Any] = {}
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy-matrix"), config).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def users(synapse: Synapse) -> dict[str, str]:
    return {name: synapse.register(name) for name in ("agent", "carol")}


@pytest.fixture
def session() -> str:
    return f"mx-{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class Room:
    """The test's room, read and written by its members on Synapse itself (not the proxy)."""

    synapse: Synapse
    users: dict[str, str]
    id: str

    def direct(self, user: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        """`user` calls the room's `path` (under /rooms/ID) on Synapse, without the proxy."""
        token = self.users[user]
        return self.synapse.direct(token, method, f"/rooms/{room(self.id)}{path}", **kwargs)

    def event(self, event_id: str) -> dict[str, Any]:
        """An event as carol sees it."""
        r = self.direct("carol", "GET", f"/event/{room(event_id)}")
        r.raise_for_status()
        return dict(r.json())

    def topic(self) -> Any:
        """The topic as carol reads it (the HTTP status when she cannot)."""
        r = self.direct("carol", "GET", "/state/m.room.topic/")
        return r.json() if r.ok else r.status_code


@pytest.fixture
def chat(synapse: Synapse, users: dict[str, str]) -> Room:
    """A room the agent and carol are in, with a topic, made without the proxy."""
    r = synapse.direct(
        users["agent"],
        "POST",
        "/createRoom",
        json={"preset": "public_chat", "topic": "Quarterly planning", "name": "plans"},
    )
    r.raise_for_status()
    made = Room(synapse, users, str(r.json()["room_id"]))
    made.direct("carol", "POST", "/join", json={}).raise_for_status()
    return made


@pytest.fixture
async def agent(
    synapse: Synapse, proxy: Undoproxy, users: dict[str, str], session: str
) -> AsyncIterator[nio.AsyncClient]:
    client = nio.AsyncClient(synapse.base_url, "@agent:localhost", proxy=proxy.proxy_url(session))
    client.access_token = users["agent"]
    client.user_id = "@agent:localhost"
    yield client
    await client.close()


async def test_a_message_sent_is_redacted_on_rollback(
    proxy: Undoproxy, chat: Room, session: str, agent: nio.AsyncClient
) -> None:
    content = {"msgtype": "m.text", "body": "the launch is moved to Friday"}
    sent = await agent.room_send(chat.id, "m.room.message", content)
    assert isinstance(sent, nio.RoomSendResponse), sent
    event_id = sent.event_id
    assert chat.event(event_id)["content"] == content
    [step] = proxy.steps(session)
    assert (step["rule"], step["kind"], step["status"]) == ("matrix/send", "mutation", "succeeded")
    assert step["meta"] == {"event_type": "m.room.message", "event_id": event_id}
    assert chat.users["agent"] not in str(step)  # nio puts the token in the query: never in clear

    report = proxy.rollback(session)
    [entry] = report["steps"]
    assert entry["status"] == "compensated", entry
    assert report["state"] == "rolled_back"
    seen = chat.event(event_id)
    assert seen["content"] == {}
    redaction = seen["unsigned"]["redacted_because"]
    assert redaction["type"] == "m.room.redaction"
    assert redaction["sender"] == "@agent:localhost"

    # The redaction's transaction id is derived from the event: sent again (a retry after a
    # lost answer), Synapse answers with the same redaction and redacts nothing twice.
    again = chat.direct(
        "agent", "PUT", f"/redact/{room(event_id)}/{txn_for(event_id)}", json={"reason": "retry"}
    )
    assert again.json()["event_id"] == redaction["event_id"]
    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "skipped"


async def test_a_state_event_is_put_back_to_its_prior_content(
    proxy: Undoproxy, chat: Room, session: str, agent: nio.AsyncClient
) -> None:
    before = chat.topic()
    assert before["topic"] == "Quarterly planning"  # (with Synapse's m.topic beside it)
    put = await agent.room_put_state(chat.id, "m.room.topic", {"topic": "Layoffs"})
    assert isinstance(put, nio.RoomPutStateResponse), put
    assert chat.topic() == {"topic": "Layoffs"}
    [step] = proxy.steps(session)
    assert step["rule"] in ("matrix/state", "matrix/state-empty-key")

    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "compensated", entry
    assert chat.topic() == before


async def test_state_that_did_not_exist_before_is_irreversible_and_left(
    proxy: Undoproxy, chat: Room, session: str, agent: nio.AsyncClient
) -> None:
    put = await agent.room_put_state(chat.id, "org.example.flag", {"on": True}, state_key="x")
    assert isinstance(put, nio.RoomPutStateResponse), put
    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "irreversible"
    assert "Matrix cannot remove a state event" in entry["detail"]
    r = chat.direct("carol", "GET", "/state/org.example.flag/x")
    assert r.json() == {"on": True}


async def test_a_state_changed_by_someone_else_since_is_a_conflict_not_overwritten(
    proxy: Undoproxy, chat: Room, session: str, agent: nio.AsyncClient
) -> None:
    power = chat.direct("agent", "GET", "/state/m.room.power_levels/").json()
    power["users"]["@carol:localhost"] = 100  # carol may set the topic too
    chat.direct("agent", "PUT", "/state/m.room.power_levels/", json=power).raise_for_status()
    put = await agent.room_put_state(chat.id, "m.room.topic", {"topic": "Layoffs"})
    assert isinstance(put, nio.RoomPutStateResponse), put
    chat.direct(
        "carol", "PUT", "/state/m.room.topic/", json={"topic": "Carol's topic"}
    ).raise_for_status()

    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "conflict", entry
    assert chat.topic() == {"topic": "Carol's topic"}


async def test_the_agent_s_own_redaction_is_irreversible(
    proxy: Undoproxy, chat: Room, session: str, agent: nio.AsyncClient
) -> None:
    r = chat.direct(
        "carol",
        "PUT",
        f"/send/m.room.message/t-{uuid.uuid4().hex}",
        json={"msgtype": "m.text", "body": "hello"},
    )
    event_id = r.json()["event_id"]
    done = await agent.room_redact(chat.id, event_id, reason="spam")
    assert isinstance(done, nio.RoomRedactResponse), done
    [entry] = proxy.rollback(session)["steps"]
    assert entry["status"] == "irreversible"
    assert "a redaction cannot be undone" in entry["detail"]


def test_the_pack_file_is_shipped(tmp_path: Path) -> None:
    from undoproxy.packs.loading import load_builtin

    names = [r.name for r in load_builtin("matrix").rules]
    assert "matrix/send" in names and "matrix/state" in names
