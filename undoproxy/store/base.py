"""The store's interface: what every module outside `undoproxy.store` may use of a journal.

Two implementations: `Journal` (SQLite, one process, `store.path`) and
`postgres.PgJournal` (PostgreSQL, any number of replicas, `store.url`); `open_store` picks
one from the config. Code outside the store types its journal as `Journal` (the SQLite class
is also the base the PostgreSQL one extends) and relies only on what this Protocol lists, so
it never knows which one it has. The SQL it passes to `writer` and `query` is SQLite's
dialect, portable to PostgreSQL (`?`/`:name` parameters are translated there).

Usage:

    journal = await open_store(config, events)
    journal.ensure_session("s1")
    await journal.write_ahead(step)           # awaited: see the rule in `undoproxy.store`
    async with journal.exclusive("s1"):       # Busy when a rollback runs elsewhere
        ...
    await journal.close()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from undoproxy.errors import JournalError, UndoproxyError
from undoproxy.events import EventBus
from undoproxy.lifecycle import Settlement
from undoproxy.store.records import Session, Step
from undoproxy.store.writer import Params


class Busy(UndoproxyError):
    """Another process holds what was asked for (a session's rollback)."""


class SessionStopped(JournalError):
    """A mutation's write-ahead found its session not taking mutations (frozen, committed, or
    being rolled back) in the database: nothing was written, nothing may be forwarded."""


class BudgetExceeded(JournalError):
    """A mutation's write-ahead found a `guard:` budget of its session used up, as every
    replica's steps count in the database: nothing was written, nothing may be forwarded."""

    def __init__(self, limit: str, value: int, scope: str) -> None:
        super().__init__(f"{scope}: {limit} {value} reached")
        self.limit, self.value, self.scope = limit, value, scope


# A budget a write-ahead is fenced on: (rule name, or None for the whole session; the limit,
# `max_mutations` or `max_mutations_per_minute`; its value).
Limit = tuple[str | None, str, int]


class LeaseLost(JournalError):
    """This rollback no longer holds its session's lease: it sends nothing more."""


class Lease:
    """A rollback's hold on its session (`Store.exclusive`): while it is valid no other
    rollback of the session runs, anywhere. `check()` raises LeaseLost once it may have
    lapsed; a compensation is sent only right after a check, so two rollbacks never send
    for the same session at once. In one process (SQLite) it never lapses while held."""

    token: str = ""

    def check(self) -> None:
        """Raise LeaseLost unless the lease is still certainly held."""
        if getattr(self, "released", False):
            raise LeaseLost("the rollback's hold on the session was released")

    def release(self) -> None:
        """Give the lease up (nothing more is sent under it)."""
        self.released = True


class Writer(Protocol):
    """The one write path (`writer.QueuedWriter`): awaited and batched writes, in order."""

    failures: int
    withdrawn: int

    def submit(self, sql: str, params: Params = ()) -> None:
        """Queue a write nobody waits for."""

    async def write(self, sql: str, params: Params = ()) -> Any:
        """Queue a write and wait for its commit (JournalError when it did not commit)."""

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""


class Store(Protocol):
    """A journal of sessions, steps, approvals and settings (see the module docstring)."""

    shared: bool  # other processes share it: state may change elsewhere
    sessions: dict[str, Session]
    frozen_all: bool
    events: EventBus

    @property
    def writer(self) -> Writer:
        """The one write path."""

    @property
    def owned(self) -> tuple[str, tuple[Any, ...]]:
        """SQL condition selecting the `steps`/`approvals` rows this process wrote."""

    def add_session(self, session: Session) -> Session:
        """Register a new session (batched)."""

    def ensure_session(self, session_id: str) -> Session:
        """The session with this id, created on first use."""

    async def find_session(self, session_id: str) -> Session | None:
        """The session, also when another process created it a moment ago."""

    async def set_session_state(self, session_id: str, state: str) -> Session:
        """Change a session's state (awaited)."""

    async def set_frozen(self, session_id: str, frozen: bool) -> Session:
        """Freeze or unfreeze a session (awaited)."""

    async def set_frozen_all(self, frozen: bool) -> None:
        """The global kill switch (awaited)."""

    async def setting(self, name: str) -> str | None:
        """A stored setting."""

    async def set_setting(self, name: str, value: str | None) -> None:
        """Store or remove a setting (awaited)."""

    def next_seq(self, session_id: str) -> int:
        """The next step number of a session (a shared journal may renumber at commit)."""

    async def write_ahead(self, step: Step, *, limits: Sequence[Limit] = ()) -> None:
        """Insert a step, awaited (a shared journal fences a mutation on its budgets)."""

    def record(self, step: Step) -> None:
        """Insert a step, batched."""

    def update(self, step: Step, **values: Any) -> None:
        """Change a step, batched."""

    async def update_now(self, step: Step, **values: Any) -> None:
        """Change a step, awaited."""

    async def mark_compensating(
        self, steps: Sequence[Step], attempts: Mapping[str, Any], *, lease: Lease
    ) -> None:
        """Mark steps `compensating` with these attempts, in one commit, under `lease`."""

    async def mark(self, step: Step, compensation: dict[str, Any], *, lease: Lease) -> None:
        """Mark one step `compensating` with its record, under `lease` (awaited)."""

    async def settle(self, step: Step, settlement: Settlement) -> None:
        """Record a rollback's verdict on a step (awaited): the only way to write one."""

    async def steps(
        self, session_id: str, *, mutations_only: bool = False, exchange: bool = True
    ) -> list[Step]:
        """A session's steps in order (without headers and bodies: `exchange=False`)."""

    async def step(self, step_id: str) -> Step | None:
        """One step by id."""

    async def step_counts(self) -> dict[str, dict[str, int]]:
        """session id -> {"steps": n, "mutations": m}."""

    async def query(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """A read-only query, rows as dicts."""

    def exclusive(self, session_id: str) -> AbstractAsyncContextManager[Lease]:
        """Held while a session is rolled back (its Lease); Busy when held elsewhere."""

    async def settled(self, session_id: str) -> None:
        """Return once no other process has a mutation of the session on its way."""

    async def claim_key(self, fingerprint: str) -> None:
        """Refuse (UndoproxyError) a credentials key other than the journal's."""

    async def close(self) -> None:
        """Commit what is queued and close."""
