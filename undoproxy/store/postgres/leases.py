"""A rollback's lease on its session, shared by every replica: at most one rollback sends.

An advisory lock on one connection is not enough: when that connection dies, PostgreSQL frees
the lock while the rollback that held it may still be about to send, and a second rollback can
start beside it. A lease is a row instead (`rollback_leases`: session, token, until, in the
database's clock), and it is checked where it matters:
- taken only when free or lapsed (`acquire`), renewed every LEASE/3 seconds by its holder;
- every `compensating` mark is fenced on it: the UPDATE applies only while the row still
  names this rollback's token and has not lapsed, in the same transaction (`FENCE`);
- the holder sends a compensation only while its own clock says the lease is valid: it counts
  LEASE - MARGIN seconds from before the statement that last took or renewed it, which is
  never later than the database's `until`. Once that time passes without a renewal,
  `check()` raises LeaseLost and nothing more goes out.
So a second rollback (which can take the lease only after `until`) never sends while the first
still may. `UNDOPROXY_ROLLBACK_LEASE` (seconds) changes LEASE, for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

from undoproxy.store.base import Busy, Lease, LeaseLost

log = logging.getLogger(__name__)
LEASE = float(os.environ.get("UNDOPROXY_ROLLBACK_LEASE") or 30.0)
MARGIN = min(5.0, LEASE / 4)  # clock drift and the time a send takes to leave
NOW = "extract(epoch FROM clock_timestamp())"
# SQL (SQLite dialect, translated) that is true while the session's lease is this token's.
FENCE = f"EXISTS (SELECT 1 FROM rollback_leases WHERE session_id=? AND token=? AND until > {NOW})"
_ACQUIRE = f"""
    INSERT INTO rollback_leases (session_id, token, until) VALUES ($1, $2, {NOW} + $3)
    ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, until = excluded.until
    WHERE rollback_leases.until <= {NOW}
    RETURNING token
"""
_RENEW = f"""
    UPDATE rollback_leases SET until = {NOW} + $3 WHERE session_id = $1 AND token = $2
    RETURNING token
"""
_RELEASE = "DELETE FROM rollback_leases WHERE session_id = $1 AND token = $2"

Connect = Callable[[], Awaitable[asyncpg.Connection]]


class PgLease(Lease):
    """A held lease: valid until `valid_until` (this process's monotonic clock)."""

    def __init__(self, session_id: str, token: str, valid_until: float) -> None:
        self.session_id = session_id
        self.token = token
        self.valid_until = valid_until
        self.lost = ""

    def check(self) -> None:
        """Raise LeaseLost unless this rollback still certainly holds the session."""
        super().check()
        if self.lost:
            raise LeaseLost(self.lost)
        if time.monotonic() >= self.valid_until:
            raise LeaseLost(
                "the rollback could not renew its hold on the session in time (the database "
                "was unreachable): it sends nothing more; a later rollback reads what it left"
            )


class _Holder:
    """The lease's own connection (replaced when it is lost) and its renewals."""

    def __init__(self, lease: PgLease, conn: asyncpg.Connection, connect: Connect) -> None:
        self.lease = lease
        self.conn = conn
        self.connect = connect

    async def run(self, sql: str) -> bool:
        """Take or renew the lease; True when the row now names this token."""
        if self.conn.is_closed():
            self.conn = await self.connect()
        started = time.monotonic()
        lease = self.lease
        row = await self.conn.fetchval(sql, lease.session_id, lease.token, LEASE)
        if row is not None:
            lease.valid_until = started + LEASE - MARGIN
        return row is not None

    async def renew(self) -> None:
        """Every LEASE/3 seconds; a lease found taken by another is lost for good."""
        while True:
            await asyncio.sleep(LEASE / 3)
            try:
                if not await self.run(_RENEW):
                    self.lease.lost = (
                        "the rollback's hold on the session lapsed and was taken elsewhere"
                    )
                    return
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                log.warning(
                    "could not renew the rollback lease of %s: %s", self.lease.session_id, exc
                )
                with contextlib.suppress(Exception):
                    await self.conn.close()

    async def release(self) -> None:
        """Give the row up (it lapses by itself when that fails) and close."""
        try:
            if self.conn.is_closed():
                self.conn = await self.connect()
            await asyncio.wait_for(
                self.conn.execute(_RELEASE, self.lease.session_id, self.lease.token), 5
            )
        except Exception as exc:
            log.info("could not release the rollback lease of %s: %s", self.lease.session_id, exc)
        with contextlib.suppress(Exception):
            await self.conn.close()


@contextlib.asynccontextmanager
async def held(session_id: str, connect: Connect) -> AsyncIterator[PgLease]:
    """Take the session's lease (Busy when another rollback holds it), renew it while the
    block runs, release it after."""
    lease = PgLease(session_id, secrets.token_hex(16), 0.0)
    holder = _Holder(lease, await connect(), connect)
    try:
        if not await holder.run(_ACQUIRE):
            raise Busy(f"a rollback of session {session_id!r} is already running")
    except BaseException:
        with contextlib.suppress(Exception):
            await holder.conn.close()
        raise
    renewing = asyncio.get_running_loop().create_task(holder.renew(), name="rollback-lease")
    try:
        yield lease
    finally:
        lease.release()
        renewing.cancel()
        with contextlib.suppress(BaseException):
            await renewing
        await holder.release()
