"""Replicas watching each other: heartbeats, and what a dead replica leaves behind.

Each replica has a row in `replicas` and holds `pg_advisory_lock(REPLICA_CLASS, its name)` on
its presence connection for as long as it runs. Every `heartbeat` seconds it updates its
row's `seen_at` and sweeps: a replica is gone when its lock is free (its process died: the
database closed its connections, `kill -9` included) or when it has not beaten for
DEAD_AFTER heartbeats (a hung or cut-off host: its connection is then ended with
`pg_terminate_backend`, which frees the lock for the next sweep). With the default heartbeat
of 10 s a replica is seen gone within 60 s, usually within one heartbeat.

Settling a gone replica, under its lock (so only one survivor does it), through the writer
(so the rows are chained), like SQLite's recovery at restart:
- its steps still `pending` become `unknown` (rollback reads the target before deciding);
- its approvals still `pending` become `expired`, and its `held` steps `denied` (the agents
  waiting on it lost their connection with it);
- its row is removed.
Sessions left `rolling_back` whose rollback lock is free (the replica running it died) become
`rollback_incomplete`. A replica also settles its own name's rows when it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from undoproxy.store.journal import session_summary, step_event
from undoproxy.store.postgres import leases, schema
from undoproxy.store.postgres.writer import returned
from undoproxy.store.records import Step

if TYPE_CHECKING:
    from undoproxy.store.postgres.journal import PgJournal

log = logging.getLogger(__name__)
DEAD_AFTER = 4  # heartbeats missed


class Replicas:
    """This replica's heartbeat and its sweeps of the others."""

    def __init__(self, journal: PgJournal, heartbeat: float) -> None:
        self.journal = journal
        self.heartbeat = heartbeat
        self._task: asyncio.Task[None] | None = None

    async def register(self, backend_pid: int) -> None:
        """Settle what an earlier run under this name left, then announce this one."""
        name = self.journal.replica
        await self.settle(name, "undoproxy restarted")
        await self.journal.writer.write(
            "INSERT INTO replicas (name, backend_pid, host, heartbeat) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET backend_pid=excluded.backend_pid, "
            "host=excluded.host, heartbeat=excluded.heartbeat, started_at=now(), seen_at=now()",
            (name, backend_pid, socket.gethostname(), self.heartbeat),
        )

    def start(self) -> None:
        """Beat and sweep every `heartbeat` seconds."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journal-heartbeat")

    async def stop(self) -> None:
        """Stop beating (the row stays: see the module docstring)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                await self.journal.writer.write(
                    "UPDATE replicas SET seen_at=now() WHERE name=?", (self.journal.replica,)
                )
                await self.sweep()
            except Exception:
                log.exception("the replicas' heartbeat or sweep failed; trying again")

    async def sweep(self) -> None:
        """Settle every replica that is gone, and every rollback whose replica died."""
        others = await self.journal.query(
            "SELECT name, backend_pid, heartbeat, "
            "extract(epoch FROM now() - seen_at) AS silent FROM replicas WHERE name<>?",
            (self.journal.replica,),
        )
        for row in others:
            async with self._locked(schema.REPLICA_CLASS, row["name"]) as free:
                if free:
                    log.warning("replica %s is gone; settling what it left", row["name"])
                    await self.settle(row["name"], f"replica {row['name']} stopped")
                    await self.journal.writer.write(
                        "DELETE FROM replicas WHERE name=?", (row["name"],)
                    )
                elif float(row["silent"]) > DEAD_AFTER * float(row["heartbeat"]):
                    log.warning(
                        "replica %s has not beaten for %.0fs; ending its connection",
                        row["name"],
                        float(row["silent"]),
                    )
                    await self.journal.query(
                        "SELECT pg_terminate_backend(?)", (row["backend_pid"],)
                    )
        # A rollback whose lease lapsed (its replica died, or lost the database) left its
        # session `rolling_back`: nothing more is sent under that lease (leases.py).
        for row in await self.journal.query(
            "SELECT id FROM sessions WHERE state='rolling_back' AND NOT EXISTS "
            "(SELECT 1 FROM rollback_leases l WHERE l.session_id = sessions.id "
            f"AND l.until > {leases.NOW})"
        ):
            await self._abandoned_rollback(row["id"])

    async def settle(self, name: str, why: str) -> None:
        """Settle a gone replica's pending steps and held requests (see the docstring)."""
        journal, now = self.journal, time.time()
        reason = f"{why} before anyone decided; the agent's connection is gone"
        changed = returned(
            await journal.writer.write(
                "UPDATE steps SET status='unknown', updated_at=?, error=coalesce(error, ?) "
                "WHERE status='pending' AND replica=?",
                (now, f"{why} before the outcome was recorded", name),
            )
        )
        changed += returned(
            await journal.writer.write(
                "UPDATE steps SET status='denied', updated_at=?, error=? "
                "WHERE status='held' AND replica=?",
                (now, f"expired: {reason}", name),
            )
        )
        expired = returned(
            await journal.writer.write(
                "UPDATE approvals SET state='expired', decided_at=?, reason=? "
                "WHERE state='pending' AND replica=?",
                (now, reason, name),
            )
        )
        # Told as the other replicas' events are: to the page here, to the others by relay.
        for row in changed:
            event = step_event(Step.from_row(row, journal.box.decrypt))
            journal.events.publish("step", event, remote=True)
            journal.relay.tell("step", event)
        for row in expired:
            event = {"id": row["id"], "session_id": row["session_id"], "state": "expired"}
            journal.events.arrived("approval", event)
            journal.relay.tell("approval", event)
        if changed or expired:
            log.warning(
                "settled replica %s: %d step(s), %d approval(s)", name, len(changed), len(expired)
            )

    async def _abandoned_rollback(self, session_id: str) -> None:
        rows = returned(
            await self.journal.writer.write(
                "UPDATE sessions SET state='rollback_incomplete', updated_at=? "
                "WHERE id=? AND state='rolling_back'",
                (time.time(), session_id),
            )
        )
        if rows:
            log.warning("the rollback of session %s stopped with its replica", session_id)
            session = await self.journal.reload_session(session_id)
            if session is not None:
                self.journal.events.publish("session", session_summary(session), remote=True)
                self.journal.relay.tell("session", session_summary(session))

    @contextlib.asynccontextmanager
    async def _locked(self, key: int, name: str) -> Any:
        """Try the advisory lock (key, name) on a pool connection; yields whether it was free."""
        async with self.journal._pool.acquire() as conn:
            free = await conn.fetchval("SELECT pg_try_advisory_lock($1, hashtext($2))", key, name)
            try:
                yield bool(free)
            finally:
                if free:
                    await conn.execute("SELECT pg_advisory_unlock($1, hashtext($2))", key, name)
