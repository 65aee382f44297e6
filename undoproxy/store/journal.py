"""The journal: sessions and steps, written through one writer, read through a second connection.

`Journal` is the store every other module uses (its interface: `undoproxy.store.base.Store`)
and its SQLite implementation; `undoproxy.store.postgres.PgJournal` overrides the parts that
differ on PostgreSQL (opening, reads, locks across processes, events from other replicas).

Which methods wait for the commit follows the rule in `undoproxy.store`: `write_ahead`,
`update_now` and `set_session_state` are awaited; `add_session`, `record` and `update` are
batched. An awaited method changes the in-memory record only as far as the database agrees.
Sessions are cached in memory because every proxied request needs its session's state: the
open ones, and the closed ones used lately (`sessionindex`); any other is read on demand
(`find_session`, `admit`). `Journal.open` takes the journal's lock (`lock.py`): one undoproxy
per journal file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from undoproxy import lifecycle
from undoproxy.credentials import CredentialBox
from undoproxy.errors import JournalError
from undoproxy.events import EventBus
from undoproxy.lifecycle import IllegalTransition, Settlement
from undoproxy.store import schema
from undoproxy.store.base import Lease, Limit
from undoproxy.store.chain import ChainKey
from undoproxy.store.lock import JournalLock
from undoproxy.store.records import STEP_COLUMNS, Session, Step, at_rest, encode_fields
from undoproxy.store.sessionindex import CLOSED_STATES, SessionIndex
from undoproxy.store.sqlite_writer import JournalWriter
from undoproxy.store.writer import QueuedWriter

_INSERT_STEP = (
    f"INSERT INTO steps ({', '.join(STEP_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in STEP_COLUMNS)})"
)
FREEZE_ALL = "freeze_all"
_EXCHANGE = {"request_headers", "request_body", "response_headers", "response_body", "meta"}
_WITHOUT_EXCHANGE = ", ".join(c for c in STEP_COLUMNS if c not in _EXCHANGE)
_SESSION_COLUMNS = (
    "id",
    "token",
    "intent",
    "agent",
    "state",
    "created_at",
    "updated_at",
    "frozen",
)


class Journal:
    """Sessions and steps of every agent, durable in SQLite."""

    # Another process may share this journal (PostgreSQL): sessions, approvals and rollbacks
    # may then change elsewhere, and the journal tells about it through `events`.
    shared = False
    # False while a shared journal cannot hear the other processes: no mutation goes out then.
    in_touch = True
    _INSERT_SESSION = (
        f"INSERT INTO sessions ({', '.join(_SESSION_COLUMNS)}) "
        f"VALUES ({', '.join('?' for _ in _SESSION_COLUMNS)})"
    )
    _INSERT_STEP = _INSERT_STEP

    def __init__(
        self,
        writer: QueuedWriter,
        read_conn: aiosqlite.Connection | None,
        events: EventBus,
        lock: JournalLock | None = None,
        box: CredentialBox | None = None,
    ) -> None:
        self.writer = writer
        self._read = read_conn
        self.events = events
        self._lock = lock
        # Seals the bodies a compensation replays (store/bodies.py); undoproxy run passes the
        # installation's key, so that they can be opened after a restart.
        self.box = box or CredentialBox.for_this_process()
        self.path: Path | None = None  # the SQLite file (None: not a file, e.g. PostgreSQL)
        self._seq: dict[str, int] = {}  # last step number of each session in memory
        self.sessions = SessionIndex(forgotten=self._forget)
        self.frozen_all = False  # the global kill switch (kept in settings)

    @classmethod
    async def open(
        cls, path: Path, events: EventBus | None = None, box: CredentialBox | None = None
    ) -> Journal:
        """Lock, open (creating or migrating) the journal at `path` and recover from a crash.

        Raises JournalInUse (an UndoproxyError naming the holder's pid) when another process
        has it open: recovering its in-flight steps would corrupt them.
        """
        lock = JournalLock.acquire(path)
        read_conn: aiosqlite.Connection | None = None
        writer: JournalWriter | None = None
        try:
            schema.create_private(path)
            setup = await schema.connect(path)
            try:
                await schema.migrate(setup)
            finally:
                await setup.close()
            key = ChainKey.of(box or CredentialBox.for_this_process())
            writer = JournalWriter(path, chain_key=key)
            writer.start()
            await _recover_writes(writer)
            read_conn = await schema.connect(path)
            read_conn.row_factory = aiosqlite.Row
            journal = cls(writer, read_conn, events or EventBus(), box=box)
            await journal._load()
        except BaseException:
            if writer is not None:
                await writer.close()
            if read_conn is not None:
                await read_conn.close()
            lock.release()
            raise
        journal._lock = lock
        journal.path = path
        return journal

    async def close(self) -> None:
        """Commit everything queued, close both connections, then give up the lock."""
        try:
            await self.writer.close()
            if self._read is not None:
                await self._read.close()
        finally:
            if self._lock is not None:
                self._lock.release()

    async def _load(self) -> None:
        """The sessions that are not closed (closed ones are read when asked for), and the
        global kill switch."""
        closed = ", ".join(f"'{state}'" for state in CLOSED_STATES)
        for values in await self.query(f"{_SELECT_SESSION} WHERE s.state NOT IN ({closed})"):
            self._remember(values)
        self.frozen_all = await self.setting(FREEZE_ALL) == "1"

    def _remember(self, values: dict[str, Any]) -> Session:
        """Keep a session read from the journal (a `_SELECT_SESSION` row) in memory."""
        session = session_of(values)
        self._seq[session.id] = max(self._seq.get(session.id, 0), int(values["last_seq"] or 0))
        self.sessions[session.id] = session
        return session

    def _forget(self, session_id: str) -> None:
        """A closed session left memory: so does its step number (read again with it)."""
        self._seq.pop(session_id, None)

    # --- what differs when other processes share the journal (see PgJournal) ---------------

    @property
    def owned(self) -> tuple[str, tuple[Any, ...]]:
        """A SQL condition (and its parameters) on `steps` and `approvals` rows that selects
        those this process wrote: all of them here, one replica's on a shared journal."""
        return "1=1", ()

    @contextlib.asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[Lease]:
        """Held while a session is rolled back; raises Busy when another process holds it.

        One process per SQLite journal (`lock`): the rollback's own bookkeeping suffices,
        and its lease holds until it is released."""
        lease = Lease()
        try:
            yield lease
        finally:
            lease.release()

    async def claim_key(self, fingerprint: str) -> None:
        """Check the credentials key against the one the journal was started with (shared
        journals: raises UndoproxyError on a mismatch); nothing to check for one process."""

    async def settled(self, session_id: str) -> None:
        """Return once no other process still has a mutation of the session on its way (a
        shared journal); this process's own are counted by `InFlight`."""

    async def find_session(self, session_id: str) -> Session | None:
        """The session with this id: in memory, else read from the journal (a closed one,
        which then stays in memory for a while)."""
        known = self.sessions.get(session_id)
        if known is not None:
            return known
        rows = await self.query(f"{_SELECT_SESSION} WHERE s.id=?", (session_id,))
        if not rows:
            return None
        known = self.sessions.get(session_id)  # another task may have read it meanwhile
        return known if known is not None else self._remember(rows[0])

    async def admit(self, session_id: str) -> Session:
        """The session a request names: in memory, else from the journal, else a new one
        (created on first use)."""
        return await self.find_session(session_id) or self.ensure_session(session_id)

    # --- sessions -------------------------------------------------------------------------

    async def _known(self, session_id: str) -> Session:
        """A session that exists (KeyError otherwise), in memory from now on."""
        session = await self.find_session(session_id)
        if session is None:
            raise KeyError(session_id)
        return session

    def add_session(self, session: Session) -> Session:
        """Register a new session (queued for commit before any of its steps)."""
        self.sessions[session.id] = session
        self.writer.submit(
            self._INSERT_SESSION, tuple(getattr(session, c) for c in _SESSION_COLUMNS)
        )
        self.events.publish("session", session_summary(session))
        return session

    def ensure_session(self, session_id: str) -> Session:
        """The session with this id, created on first use."""
        return self.sessions.get(session_id) or self.add_session(Session(id=session_id))

    async def set_session_state(self, session_id: str, state: str) -> Session:
        """Change a session's state durably (awaited); JournalError leaves it as it was.

        The cached state changes at once, so the proxy already sees it (e.g. `rolling_back`
        refuses new mutations) while the commit is awaited; it is put back if the write fails.
        """
        session = await self._known(session_id)
        before = session.state, session.updated_at
        mine = state, time.time()
        session.state, session.updated_at = mine
        try:
            await self.writer.write(
                "UPDATE sessions SET state=?, updated_at=? WHERE id=?", (*mine, session_id)
            )
        except JournalError:
            if (session.state, session.updated_at) == mine:  # nobody changed it meanwhile
                session.state, session.updated_at = before
            raise
        self.sessions.place(session)  # closed: it leaves the open ones
        self.events.publish("session", session_summary(session))
        return session

    async def set_frozen(self, session_id: str, frozen: bool) -> Session:
        """Freeze or unfreeze a session durably (awaited; JournalError leaves it as it was)."""
        session = await self._known(session_id)
        before = session.frozen, session.updated_at
        session.frozen, session.updated_at = frozen, time.time()
        try:
            await self.writer.write(
                "UPDATE sessions SET frozen=?, updated_at=? WHERE id=?",
                (int(frozen), session.updated_at, session_id),
            )
        except JournalError:
            session.frozen, session.updated_at = before
            raise
        self.events.publish("session", session_summary(session))
        return session

    async def set_frozen_all(self, frozen: bool) -> None:
        """The global kill switch, durably (awaited): every session's mutations refused."""
        before, self.frozen_all = self.frozen_all, frozen  # at once: the proxy sees it now
        try:
            await self.set_setting(FREEZE_ALL, "1" if frozen else None)
        except JournalError:
            self.frozen_all = before
            raise
        self.events.publish("freeze", {"all": frozen})

    async def setting(self, name: str) -> str | None:
        """A stored setting (e.g. the global freeze), or None."""
        rows = await self.query("SELECT value FROM settings WHERE name=?", (name,))
        return str(rows[0]["value"]) if rows else None

    async def set_setting(self, name: str, value: str | None) -> None:
        """Store (or, with None, remove) a setting durably (awaited)."""
        if value is None:
            await self.writer.write("DELETE FROM settings WHERE name=?", (name,))
        else:
            await self.writer.write(
                "INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value, "
                "updated_at=excluded.updated_at",
                (name, value, time.time()),
            )

    def next_seq(self, session_id: str) -> int:
        """The next step number of a session (1, 2, ...)."""
        seq = self._seq.get(session_id, 0) + 1
        self._seq[session_id] = seq
        return seq

    # --- steps ----------------------------------------------------------------------------

    async def write_ahead(self, step: Step, *, limits: Sequence[Limit] = ()) -> None:
        """Insert a step and wait until it is committed and fsync'd (raises JournalError).
        `limits` are for a shared journal (one process counts its budgets exactly itself).

        A shared journal numbers the step in its session as it commits it: `step.seq` is then
        the number the database gave it."""
        rows = await self.writer.write(self._INSERT_STEP, step.to_row(self.box.encrypt))
        if rows:
            step.seq = rows[0]["seq"]
        self.events.publish("step", step_event(step))

    def record(self, step: Step) -> None:
        """Insert a step without waiting (reads, requests undoproxy answered itself)."""
        self.writer.submit(self._INSERT_STEP, step.to_row(self.box.encrypt))
        self.events.publish("step", step_event(step))

    def _update_sql(self, step_id: str, values: dict[str, Any]) -> tuple[str, list[Any]]:
        values = {**values, "updated_at": time.time()}
        encoded = encode_fields(values, self.box.encrypt)
        sets = ", ".join(f"{k}=?" for k in encoded)
        return f"UPDATE steps SET {sets} WHERE id=?", [*encoded.values(), step_id]

    def update(self, step: Step, **values: Any) -> None:
        """Change some fields of a step without waiting: progress nothing later decides on.

        A mutation's outcome after its response is such progress: if it is lost in a crash the
        step stays `pending`, becomes `unknown` at restart, and rollback reads the target.
        Use `update_now` for anything a later decision depends on. A status change must be
        one the lifecycle allows (IllegalTransition otherwise); a verdict goes through
        `settle`.
        """
        _guard(step, values)
        for k, v in values.items():
            setattr(step, k, v)
        self.writer.submit(*self._update_sql(step.id, values))
        self.events.publish("step", step_event(step))

    async def update_now(self, step: Step, **values: Any) -> None:
        """Change some fields of a step and wait for the commit (awaited: `compensating`
        marks, compensation results, a held step about to be sent).

        `step` is changed only once the database has the values; JournalError leaves both
        as they were. Status changes are checked as `update` says.
        """
        _guard(step, values)
        await self._update_now(step, values)

    async def _update_now(self, step: Step, values: dict[str, Any]) -> None:
        await self.writer.write(*self._update_sql(step.id, values))
        self._applied(step, values)

    def _applied(self, step: Step, values: Mapping[str, Any]) -> None:
        """The database has `values`: the in-memory step and the event bus follow."""
        for k, v in values.items():
            setattr(step, k, v)
        self.events.publish("step", step_event(step))

    async def mark(self, step: Step, compensation: dict[str, Any], *, lease: Lease) -> None:
        """Mark one step `compensating` with its compensation record (attempts counted),
        awaited, while `lease` holds: what a rollback writes right before it sends (LeaseLost
        when the lease lapsed; JournalError when it could not be written)."""
        values = {"status": lifecycle.StepStatus.COMPENSATING.value, "compensation": compensation}
        _guard(step, values)
        lease.check()
        sql, params = self._update_sql(step.id, values)
        await self._fenced(sql, params, step.session_id, lease, 1)
        self._applied(step, values)

    async def settle(self, step: Step, settlement: Settlement) -> None:
        """Record a rollback's verdict on a step, awaited: the only way a step becomes
        `compensated` or gets a report status (`compensation_status`). A `Settlement` cannot
        claim compensated or skipped without its evidence (lifecycle.py)."""
        values: dict[str, Any] = {
            "compensation_status": settlement.report,
            "compensation_detail": settlement.detail,
        }
        if settlement.compensation is not None:
            values["compensation"] = settlement.compensation
        if settlement.status is not None:
            lifecycle.check(step.status, settlement.status)
            values["status"] = settlement.status.value
        await self._update_now(step, values)

    def set_after(self, step: Step, after: dict[str, Any]) -> None:
        """Record what a read right after the step found (its after-image), batched: only the
        record's `after` changes, never the rest (written before it, from a fresher copy)."""
        sealed = at_rest("compensation", {"after": after}, self.box.encrypt)["after"]
        self.writer.submit(
            f"UPDATE steps SET updated_at=?, compensation={self._WITH_AFTER} WHERE id=?",
            (time.time(), json.dumps(sealed), step.id),
        )
        if step.compensation is not None:
            step.compensation = {**step.compensation, "after": after, "needs_after_read": False}

    # The compensation record with `after` (a JSON parameter) set in it, in the database.
    _WITH_AFTER = (
        "json_set(coalesce(compensation, '{}'), '$.after', json(?), '$.needs_after_read', "
        "json('false'))"
    )
    # The compensation record with `rollback` (a JSON parameter) set in it, in the database.
    _WITH_ATTEMPTS = "json_set(coalesce(compensation, '{}'), '$.rollback', json(?))"

    async def mark_compensating(
        self, steps: Sequence[Step], attempts: Mapping[str, Any], *, lease: Lease
    ) -> None:
        """Mark `steps` `compensating`, `attempts` recorded in each compensation record, in one
        statement and one commit (awaited), while `lease` holds: what a rollback writes before
        it sends their compensations. The Step objects are left as they were (the rollback
        decides on them)."""
        if not steps:
            return
        for step in steps:
            lifecycle.check(step.status, lifecycle.StepStatus.COMPENSATING)
        lease.check()
        now = time.time()
        ids = ", ".join("?" for _ in steps)
        sql = (
            f"UPDATE steps SET status='compensating', updated_at=?, "
            f"compensation={self._WITH_ATTEMPTS} WHERE id IN ({ids})"
        )
        params = [now, json.dumps(dict(attempts)), *(step.id for step in steps)]
        await self._fenced(sql, params, steps[0].session_id, lease, len(steps))
        for step in steps:
            marked = dataclasses.replace(step, status="compensating", updated_at=now)
            self.events.publish("step", step_event(marked))

    async def _fenced(
        self, sql: str, params: list[Any], session_id: str, lease: Lease, rows: int
    ) -> None:
        """Run a rollback's write while its lease holds (one process here: checked already);
        a shared journal adds the fence to the statement itself."""
        await self.writer.write(sql, params)

    async def steps(
        self, session_id: str, *, mutations_only: bool = False, exchange: bool = True
    ) -> list[Step]:
        """A session's steps in order (committed ones: call `writer.flush()` first to see all).

        `exchange=False` leaves out what the agent and the upstream exchanged (the request's
        and response's headers and bodies, up to 1 MiB each): what a rollback never reads."""
        sql = f"SELECT {'*' if exchange else _WITHOUT_EXCHANGE} FROM steps WHERE session_id=?"
        if mutations_only:
            sql += " AND is_mutation=1"
        rows = await self.query(sql + " ORDER BY seq", (session_id,))
        return [Step.from_row(r, self.box.decrypt) for r in rows]

    async def step(self, step_id: str) -> Step | None:
        """One step by id."""
        rows = await self.query("SELECT * FROM steps WHERE id=?", (step_id,))
        return Step.from_row(rows[0], self.box.decrypt) if rows else None

    async def step_counts(self, session_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """session id -> {"steps": n, "mutations": m, "held": h} for these sessions (kept with
        the steps, `counts.py`: the cost does not grow with the journal)."""
        if not session_ids:
            return {}
        marks = ", ".join("?" for _ in session_ids)
        rows = await self.query(
            "SELECT session_id, steps, mutations, held FROM session_counts "
            f"WHERE session_id IN ({marks})",
            tuple(session_ids),
        )
        return {
            r["session_id"]: {"steps": r["steps"], "mutations": r["mutations"], "held": r["held"]}
            for r in rows
        }

    async def query(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """A read-only query on the read connection, rows as dicts.

        The SQL is SQLite's, with `?` or `:name` parameters; a shared journal translates it."""
        assert self._read is not None
        async with self._read.execute(sql, tuple(params)) as cur:
            return [dict(r) for r in await cur.fetchall()]


def _guard(step: Step, values: Mapping[str, Any]) -> None:
    """Refuse a status change the lifecycle does not allow, and any verdict written outside
    `settle` (IllegalTransition: a bug of ours, raised before anything is written)."""
    status = values.get("status")
    compensated = lifecycle.StepStatus.COMPENSATED
    if status is not None and lifecycle.check(step.status, status) == compensated:
        raise IllegalTransition("a step becomes compensated only through settle()")
    if "compensation_status" in values:
        raise IllegalTransition("a verdict is recorded only through settle()")


async def _recover_writes(writer: QueuedWriter) -> None:
    """After a crash: what was in flight has an unknown outcome; a rollback did not finish.

    Written through the writer like every other change, so the rows it changes are chained.
    """
    # A mutation still `pending` was journaled and perhaps sent when we last stopped:
    # its outcome is unknown, and rollback must re-read the target before deciding.
    now = time.time()
    await writer.write(
        "UPDATE steps SET status='unknown', updated_at=?, error=coalesce(error, "
        "'undoproxy stopped before the outcome was recorded') WHERE status='pending'",
        (now,),
    )
    await writer.write(
        "UPDATE sessions SET state='rollback_incomplete', updated_at=? WHERE state='rolling_back'",
        (now,),
    )


# A session with its last step number (for `next_seq`), as `_remember` takes it.
_SELECT_SESSION = (
    f"SELECT {', '.join('s.' + c for c in _SESSION_COLUMNS)}, c.last_seq AS last_seq "
    "FROM sessions s LEFT JOIN session_counts c ON c.session_id = s.id"
)


def session_of(row: dict[str, Any]) -> Session:
    """The Session a row of `sessions` describes."""
    values = {c: row[c] for c in _SESSION_COLUMNS}
    values["frozen"] = bool(values["frozen"])
    return Session(**values)


def session_summary(session: Session) -> dict[str, Any]:
    """The public view of a session (never its token)."""
    return {
        "id": session.id,
        "intent": session.intent,
        "agent": session.agent,
        "state": session.state,
        "frozen": session.frozen,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def step_event(step: Step) -> dict[str, Any]:
    """The small summary of a step published on the event bus."""
    return {
        "id": step.id,
        "session_id": step.session_id,
        "seq": step.seq,
        "method": step.method,
        "status": step.status,
        "rule": step.rule,
        "response_status": step.response_status,
        # For /metrics (undoproxy/metrics.py): kind, action, latency, rollback outcome.
        "is_mutation": step.is_mutation,
        "action": step.action,
        "duration_ms": step.duration_ms,
        "compensation_status": step.compensation_status,
    }
