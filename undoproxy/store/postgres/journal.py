"""The journal on PostgreSQL: one database shared by any number of `undoproxy run` replicas.

`PgJournal` is `Journal` (sessions, steps, the rules of awaited and batched writes) with what
changes when other processes share the store:
- writes go through `PgWriter` (one transaction per batch; the hash chain across replicas);
- a step is numbered in its session by the database as it commits (`max(seq) + 1` under the
  chain lock), so one session's steps may pass through several replicas;
- a session is inserted `ON CONFLICT DO NOTHING` (two replicas may meet a new one at once)
  and loaded from the database when a replica does not know it yet (`find_session`);
- events cross replicas (`relay`); replicas watch each other (`replicas`);
- a rollback holds its session's lease (`leases.py`) for as long as it runs (`exclusive`): a
  second one, on any replica, gets Busy (409) until the first releases it or it lapses; every
  `compensating` mark is fenced on it, so a rollback that lost it sends nothing more;
- a mutation is written ahead only while its session is open and not frozen as the database
  has it (`write_ahead`), whatever this replica has heard so far;
- the credentials key's fingerprint is kept in `settings` (`claim_key`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import asyncpg

from undoproxy.credentials import CredentialBox
from undoproxy.errors import UndoproxyError
from undoproxy.events import EventBus
from undoproxy.store.base import BudgetExceeded, Lease, LeaseLost, Limit, SessionStopped
from undoproxy.store.chain import ChainKey
from undoproxy.store.journal import _INSERT_STEP, Journal, session_of, step_event
from undoproxy.store.postgres import leases, schema
from undoproxy.store.postgres.relay import Relay
from undoproxy.store.postgres.replicas import Replicas
from undoproxy.store.postgres.sql import translate
from undoproxy.store.postgres.writer import PgWriter, key_the_chain, returned
from undoproxy.store.records import Session, Step

log = logging.getLogger(__name__)
KEY_SETTING = "credentials_key_sha256"


# The writer's connection: a write blocked on a lock (someone's LOCK TABLE, a stuck replica's
# chain lock) fails after 5 s, so that its request is answered 503 then, not after minutes.
WRITER_CONNECTION: dict[str, Any] = {"command_timeout": 60, "lock_timeout_ms": 5000}
SETTLE = 10.0  # how long a rollback waits for another replica's mutation still in flight


class PgJournal(Journal):
    """Sessions and steps of every agent of every replica, durable in PostgreSQL."""

    shared = True
    _INSERT_SESSION = Journal._INSERT_SESSION + " ON CONFLICT (id) DO NOTHING"
    _WITH_ATTEMPTS = (
        "jsonb_set(coalesce(compensation, '{}')::jsonb, '{rollback}', (?)::jsonb)::text"
    )
    _WITH_AFTER = (
        "jsonb_set(jsonb_set(coalesce(compensation, '{}')::jsonb, '{after}', (?)::jsonb), "
        "'{needs_after_read}', 'false'::jsonb)::text"
    )
    _INSERT_STEP = _INSERT_STEP.replace(
        ":seq", "(SELECT coalesce(max(seq), 0) + 1 FROM steps WHERE session_id = :session_id)"
    )
    # The write-ahead of a mutation: inserted only while its session takes mutations. Chained
    # writes of every replica run one at a time (the writer's chain lock), so a rollback's or
    # freeze's committed change of the session is what this statement sees.
    _FENCED_INSERT = (
        _INSERT_STEP.replace(" VALUES (", " SELECT ", 1).rstrip(")")
        + " WHERE EXISTS (SELECT 1 FROM sessions WHERE id = :session_id AND state = 'open'"
        " AND frozen = 0) AND NOT EXISTS (SELECT 1 FROM settings WHERE name = 'freeze_all'"
        " AND value = '1')"
    )

    def __init__(
        self,
        url: str,
        replica: str,
        writer: PgWriter,
        pool: asyncpg.Pool,
        presence: asyncpg.Connection,
        events: EventBus,
        box: CredentialBox | None = None,
    ) -> None:
        super().__init__(writer, None, events, box=box)
        self.url = url
        self.replica = replica
        self._pool = pool
        self._presence = presence  # holds this replica's lock and listens
        self.relay = Relay(self)
        self.replicas: Replicas | None = None
        self.in_touch = True
        self._rejoining: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        events: EventBus | None = None,
        box: CredentialBox | None = None,
        *,
        heartbeat: float = 10.0,
        replica: str | None = None,
    ) -> PgJournal:
        """Migrate (under a lock), register this replica, recover what dead replicas left,
        then listen to the others. Raises UndoproxyError when the database cannot be used."""
        replica = replica or default_replica_name()
        try:
            presence = await schema.connect(url, replica)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise UndoproxyError(f"cannot connect to the journal at {shown(url)}: {exc}") from None
        pool: asyncpg.Pool | None = None
        writer: PgWriter | None = None
        try:
            await schema.migrate(presence)
            if not await presence.fetchval(
                "SELECT pg_try_advisory_lock($1, hashtext($2))", schema.REPLICA_CLASS, replica
            ):
                raise UndoproxyError(f"another replica named {replica!r} is running")
            key = ChainKey.of(box or CredentialBox.for_this_process())
            await key_the_chain(presence, key)
            writer = PgWriter(
                await schema.connect(url, replica, **WRITER_CONNECTION),
                lambda: schema.connect(url, replica, **WRITER_CONNECTION),
                chain_key=key,
            )
            writer.start()
            pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
            assert pool is not None
            journal = cls(url, replica, writer, pool, presence, events or EventBus(), box)
            journal.replicas = Replicas(journal, heartbeat)
            await journal.replicas.register(presence.get_server_pid())
            await journal.replicas.sweep()  # what dead replicas (an earlier run too) left
            await journal._load()
            await journal.relay.start(presence)
            journal.replicas.start()
        except BaseException as exc:
            if writer is not None:
                await writer.close()
            if pool is not None:
                await pool.close()
            await presence.close()
            if isinstance(exc, OSError | asyncpg.PostgresError | asyncpg.InterfaceError):
                raise UndoproxyError(f"the journal at {shown(url)} cannot be used: {exc}") from None
            raise
        return journal

    def lost_touch(self) -> None:
        """The listening connection is gone: out of touch until `_rejoin` is done."""
        self.in_touch = False
        if self._rejoining is None or self._rejoining.done():
            self._rejoining = asyncio.get_running_loop().create_task(
                self._rejoin(), name="journal-rejoin"
            )

    async def _rejoin(self) -> None:
        """Connect again, listen, reload what the cache holds, then take mutations again."""
        delay = 0.2
        while True:
            try:
                presence = await schema.connect(self.url, self.replica)
                try:
                    await presence.fetchval(
                        "SELECT pg_try_advisory_lock($1, hashtext($2))",
                        schema.REPLICA_CLASS,
                        self.replica,
                    )
                    await self.relay.listen_on(presence)  # events from now on are queued
                    for session_id in list(self.sessions):
                        await self.reload_session(session_id)
                    await self.reload_frozen_all()
                except BaseException:
                    await presence.close()
                    raise
                old, self._presence = self._presence, presence
                with contextlib.suppress(Exception):
                    await old.close()
                self.in_touch = True
                self.events.arrived("rejoined", {})
                log.warning("the journal hears the other replicas again; mutations resume")
                return
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("cannot reach the journal to rejoin the replicas (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        """Stop watching and listening, commit what is queued, close every connection.

        This replica's row stays: the lock it held goes with its connection, and the next
        sweep (here or on another replica) settles what it left and removes the row."""
        try:
            if self._rejoining is not None:
                self._rejoining.cancel()
                with contextlib.suppress(BaseException):
                    await self._rejoining
            if self.replicas is not None:
                await self.replicas.stop()
            await self.relay.stop()
            await self.writer.close()
        finally:
            await self._pool.close()
            await self._presence.close()

    # --- reads --------------------------------------------------------------------------

    async def query(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """A read-only query (SQLite's SQL, translated), rows as dicts."""
        statement = translate(sql)
        params = params if isinstance(params, dict) else tuple(params)
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(statement.sql, *statement.args(params))
        return [dict(r) for r in rows]

    @property
    def owned(self) -> tuple[str, tuple[Any, ...]]:
        """Rows this replica inserted."""
        return "replica=?", (self.replica,)

    async def find_session(self, session_id: str) -> Session | None:
        """The session, loaded from the database when another replica just created it."""
        return self.sessions.get(session_id) or await self.reload_session(session_id)

    async def reload_session(self, session_id: str) -> Session | None:
        """Refresh one session from the database into the cache (in place: others hold it)."""
        rows = await self.query("SELECT * FROM sessions WHERE id=?", (session_id,))
        if not rows:
            return None
        fresh = session_of(rows[0])
        known = self.sessions.get(session_id)
        if known is None:
            self.sessions[session_id] = fresh
            return fresh
        for name in ("token", "intent", "agent", "state", "created_at", "updated_at", "frozen"):
            setattr(known, name, getattr(fresh, name))
        self.sessions.place(known)  # closed elsewhere: it leaves the open ones
        return known

    async def reload_frozen_all(self) -> None:
        """Refresh the global kill switch from the database."""
        self.frozen_all = await self.setting("freeze_all") == "1"

    # --- across replicas ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[Lease]:
        """Hold the session's rollback lease (`leases.py`) or raise Busy."""
        async with leases.held(session_id, lambda: asyncpg.connect(self.url)) as lease:
            yield lease

    async def _fenced(
        self, sql: str, params: list[Any], session_id: str, lease: Lease, rows: int
    ) -> None:
        """The write applies only while the session's lease row is this rollback's, in the
        same transaction: a rollback whose lease lapsed (and may have been taken by another)
        changes nothing, and LeaseLost says so."""
        result = await self.writer.write(
            f"{sql} AND {leases.FENCE}", [*params, session_id, lease.token]
        )
        if len(returned(result)) != rows:
            raise LeaseLost(
                "the rollback's hold on the session lapsed before it could mark the step; "
                "nothing was sent"
            )

    async def write_ahead(self, step: Step, *, limits: Sequence[Limit] = ()) -> None:
        """Insert a mutation's step about to be forwarded (`pending`), fenced in the same
        statement on what the database says, whatever this replica has heard so far:
        - its session is open and neither it nor everything is frozen (another replica may
          have frozen it or started rolling it back a moment ago); SessionStopped otherwise;
        - each of `limits` (its `guard:` budgets) still has room, counted over every
          replica's steps; BudgetExceeded otherwise.
        Chained writes of every replica run one at a time (the writer's chain lock), so two
        replicas never both take the last unit of a budget. Nothing is written when refused."""
        if step.status != "pending":  # held: it goes out only through a later, checked write
            await super().write_ahead(step)
            return
        row = step.to_row(self.box.encrypt)
        sql = self._FENCED_INSERT
        for n, (rule, limit, value) in enumerate(limits):
            sql += f" AND ({_COUNTED}{_rule_and_window(n, rule, limit)}) < :limit_{n}"
            row[f"limit_{n}"] = value
            if rule is not None:
                row[f"limit_rule_{n}"] = rule
        rows = returned(await self.writer.write(sql, row))
        if not rows:
            await self.reload_session(step.session_id)
            await self.reload_frozen_all()
            session = self.sessions.get(step.session_id)
            stopped = self.frozen_all or session is None or session.frozen
            if stopped or (session is not None and session.state != "open"):
                raise SessionStopped(f"session {step.session_id!r} takes no mutations now")
            raise await self._exceeded(step, limits)
        step.seq = rows[0]["seq"]
        self.events.publish("step", step_event(step))

    async def _exceeded(self, step: Step, limits: Sequence[Limit]) -> BudgetExceeded:
        """Which budget refused a write-ahead (the first one used up)."""
        for n, (rule, limit, value) in enumerate(limits):
            params: dict[str, Any] = {"session_id": step.session_id, "created_at": time.time()}
            if rule is not None:
                params[f"limit_rule_{n}"] = rule
            rows = await self.query(
                f"SELECT ({_COUNTED}{_rule_and_window(n, rule, limit)}) AS n", params
            )
            if rows and rows[0]["n"] >= value:
                return BudgetExceeded(limit, value, "session" if rule is None else f"rule {rule}")
        rule, limit, value = limits[0] if limits else (None, "max_mutations", 0)
        return BudgetExceeded(limit, value, "session" if rule is None else f"rule {rule}")

    async def settled(self, session_id: str) -> None:
        """Wait (up to SETTLE seconds) until no other replica has a mutation of the session
        still `pending` (forwarded, its outcome about to be committed over there: its agent
        may have its answer already) or `held` (its approval is being denied there, as the
        rollback's notice arrives). What a dead replica left is the sweep's to settle
        (`unknown`); what is still pending after SETTLE is reported still in flight."""
        deadline = time.monotonic() + SETTLE
        while True:
            rows = await self.query(
                "SELECT count(*) AS n FROM steps "
                "WHERE session_id=? AND status IN ('pending', 'held') AND replica<>?",
                (session_id, self.replica),
            )
            if not rows[0]["n"] or time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.05)

    async def claim_key(self, fingerprint: str) -> None:
        """The first replica records its key's fingerprint; a replica with another refuses."""
        await self.writer.write(
            "INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO NOTHING",
            (KEY_SETTING, fingerprint, time.time()),
        )
        recorded = await self.setting(KEY_SETTING)
        if recorded != fingerprint:
            raise UndoproxyError(
                f"this replica's credentials key (fingerprint {fingerprint[:16]}) is not the one "
                f"the journal at {shown(self.url)} was started with (fingerprint "
                f"{str(recorded)[:16]}): every replica must use the same credentials key "
                "(the state dir's credentials.key or UNDOPROXY_CREDENTIALS_KEY), or it could "
                "not open the credentials the others sealed for rollback"
            )


# A session's mutations on their way or gone upstream (what a budget counts), as SQL.
_COUNTED = (
    "SELECT count(*) FROM steps WHERE session_id = :session_id AND is_mutation = 1 "
    "AND status NOT IN ('held', 'denied')"
)


def _rule_and_window(n: int, rule: str | None, limit: str) -> str:
    """The rest of a budget's count: its rule, and the last minute for a per-minute one."""
    extra = f" AND rule = :limit_rule_{n}" if rule is not None else ""
    if limit == "max_mutations_per_minute":
        extra += " AND created_at > CAST(:created_at AS double precision) - 60.0"
    return extra


def default_replica_name() -> str:
    """A name no other replica has: host, pid and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def shown(url: str) -> str:
    """The database URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in creds else ''}@{host}"
