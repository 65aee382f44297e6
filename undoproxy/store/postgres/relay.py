"""Journal events across replicas, with PostgreSQL's LISTEN/NOTIFY.

Out: every event this replica publishes (steps, sessions, approvals, the kill switch) is
gathered and sent with `pg_notify` through the journal's writer, one notification per batch
of events, so PostgreSQL delivers it when the transaction commits — after the rows it tells
about. A notification carries at most ~8000 bytes: an approval travels as its id and state
(its body and diff can be large), anything else too large is not relayed (logged).

In: the replica's presence connection LISTENs; each event from another replica is handled
in order by one task, acting on what the database says, never on what a notification says
(any role that can LOGIN may `pg_notify` on the channel):
- `session`: the session is reloaded from the database into the cache (its state, frozen
  flag and token are what other hooks decide on), handed to `EventBus.arrived` (the
  approvals queue denies what it holds of a session frozen or being rolled back) and
  re-published;
- `freeze`: the global kill switch is reloaded and handed to `arrived` as the database has it;
- `approval`: handed to `EventBus.arrived` (the approvals queue releases or refuses a request
  it holds, and re-publishes the approval as it now is);
- anything else (`step`): re-published as it came.
Re-published events are `remote`: the page's stream sees them, metrics and this relay do not.

A replica whose listening connection is lost no longer hears the others (a freeze, a rollback,
a decision made there): it is out of touch (`PgJournal.in_touch`) and takes no mutation (503)
until it has connected again, reloaded every session it holds and the kill switch, and had its
held requests checked against the database (`rejoined`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

import asyncpg

from undoproxy.store.journal import session_summary
from undoproxy.store.postgres.schema import CHANNEL

if TYPE_CHECKING:
    from undoproxy.store.postgres.journal import PgJournal

log = logging.getLogger(__name__)
LIMIT = 7900  # bytes of one notification's payload (PostgreSQL's limit is 8000)
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', ?)"


class Relay:
    """Sends this replica's events to the others, and takes theirs in."""

    def __init__(self, journal: PgJournal) -> None:
        self.journal = journal
        self._outbox: list[dict[str, Any]] = []
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._stop_listening: Any = None
        self._conn: asyncpg.Connection | None = None

    async def start(self, conn: asyncpg.Connection) -> None:
        """Listen on `conn` and relay this replica's events from now on."""
        await self.listen_on(conn)
        self._task = asyncio.get_running_loop().create_task(self._handle(), name="journal-relay")
        self._stop_listening = self.journal.events.listen(self._publish)

    async def listen_on(self, conn: asyncpg.Connection) -> None:
        """Hear the other replicas on `conn` (a new one, after the last was lost)."""
        self._conn = conn
        await conn.add_listener(CHANNEL, self._received)
        conn.add_termination_listener(self._lost)

    async def stop(self) -> None:
        """Stop relaying; what is gathered is sent with the writer's last batch."""
        if self._stop_listening is not None:
            self._stop_listening()
            self._stop_listening = None
        self._send()
        if self._conn is not None:
            self._conn.remove_termination_listener(self._lost)  # closing is not losing it
            if not self._conn.is_closed():
                with contextlib.suppress(Exception):
                    await self._conn.remove_listener(CHANNEL, self._received)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # --- out ----------------------------------------------------------------------------

    def tell(self, kind: str, data: dict[str, Any]) -> None:
        """Send an event to the other replicas only (this one was told otherwise)."""
        self._publish(kind, data)

    def _publish(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "approval":
            data = {k: data.get(k) for k in ("id", "session_id", "state")}
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._send)
        self._outbox.append({"k": kind, "d": data})

    def _send(self) -> None:
        events, self._outbox = self._outbox, []
        chunk: list[str] = []
        size = 0
        for event in events:
            text = json.dumps(event, separators=(",", ":"), default=str)
            if len(text) > LIMIT - 100:
                log.warning("a %s event is too large to relay to other replicas", event["k"])
                continue
            if size + len(text) > LIMIT - 100:
                self._notify(chunk)
                chunk, size = [], 0
            chunk.append(text)
            size += len(text) + 1
        if chunk:
            self._notify(chunk)

    def _notify(self, chunk: list[str]) -> None:
        payload = f'{{"r":{json.dumps(self.journal.replica)},"e":[{",".join(chunk)}]}}'
        self.journal.writer.submit(_NOTIFY, (payload,))

    # --- in -----------------------------------------------------------------------------

    def _received(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            log.warning("an unreadable journal event from another replica was ignored")
            return
        if message.get("r") == self.journal.replica:
            return
        for event in message.get("e", []):
            self._inbox.put_nowait(event)

    def _lost(self, conn: Any) -> None:
        log.error(
            "the journal's listening connection was lost: this replica takes no mutations "
            "until it hears the other replicas again"
        )
        self.journal.lost_touch()

    async def _handle(self) -> None:
        while True:
            event = await self._inbox.get()
            try:
                await self._apply(event["k"], event["d"])
            except Exception:
                log.exception("an event from another replica could not be applied")

    async def _apply(self, kind: str, data: dict[str, Any]) -> None:
        journal, events = self.journal, self.journal.events
        if kind == "session":
            session = await journal.reload_session(str(data.get("id")))
            if session is not None:
                summary = session_summary(session)
                events.arrived("session", summary)
                events.publish("session", summary, remote=True)
        elif kind == "freeze":
            await journal.reload_frozen_all()
            known = {"all": journal.frozen_all}  # the database's word, not the payload's
            events.arrived("freeze", known)
            events.publish("freeze", known, remote=True)
        elif kind == "approval":
            events.arrived(kind, data)
        else:
            events.publish(kind, data, remote=True)
