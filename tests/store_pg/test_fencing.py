"""Two replicas of one PostgreSQL journal never act on a stale view of a session (issue #21):
a rollback's lease fences every `compensating` mark, and a mutation's write-ahead is fenced
on the session's state in the database, whatever a replica has heard so far."""

from __future__ import annotations

import asyncio

import pytest

from tests.store.helpers import a_step
from tests.support.postgres import Cluster
from undoproxy.store.base import BudgetExceeded, Busy, LeaseLost, SessionStopped
from undoproxy.store.postgres.journal import PgJournal
from undoproxy.store.records import Session


def database_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def two(url: str) -> tuple[PgJournal, PgJournal]:
    return await PgJournal.connect(url), await PgJournal.connect(url)


async def test_a_second_rollback_waits_for_the_lease_anywhere(pg_url: str) -> None:
    a, b = await two(pg_url)
    try:
        a.add_session(Session(id="s1"))
        await a.writer.flush()
        async with a.exclusive("s1") as lease:
            lease.check()
            with pytest.raises(Busy):
                async with b.exclusive("s1"):
                    pass
        async with b.exclusive("s1") as taken:  # released: the next one may run
            taken.check()
    finally:
        await a.close()
        await b.close()


async def test_a_rollback_whose_lease_lapsed_marks_nothing_and_sends_nothing(
    pg_url: str, pg_cluster: Cluster
) -> None:
    # A's database connection was lost long enough for its lease to lapse, and B took over:
    # A's next mark changes nothing (fenced in the same statement), and A knows it.
    a, b = await two(pg_url)
    try:
        a.add_session(Session(id="s1"))
        step = a_step(a, "s1")
        await a.write_ahead(step)
        await a.update_now(step, status="succeeded")
        async with a.exclusive("s1") as lease_a:
            pg_cluster.psql("UPDATE rollback_leases SET until = 0", database_of(pg_url))
            async with b.exclusive("s1") as lease_b:
                with pytest.raises(LeaseLost):
                    await a.mark(step, {"ready": True, "rollback": {"sent": 1}}, lease=lease_a)
                with pytest.raises(LeaseLost):
                    await a.mark_compensating([step], {"sent": 1}, lease=lease_a)
                stored = await b.step(step.id)
                assert stored is not None and stored.status == "succeeded"  # untouched
                await b.mark(stored, {"ready": True, "rollback": {"sent": 1}}, lease=lease_b)
                again = await a.step(step.id)
                assert again is not None and again.status == "compensating"
    finally:
        await a.close()
        await b.close()


async def test_a_lease_that_cannot_be_renewed_stops_sending_before_it_can_lapse(
    pg_url: str, pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from undoproxy.store.postgres import leases

    monkeypatch.setattr(leases, "LEASE", 1.2)
    monkeypatch.setattr(leases, "MARGIN", 0.3)
    a = await PgJournal.connect(pg_url)
    try:
        a.add_session(Session(id="s1"))
        await a.writer.flush()
        async with a.exclusive("s1") as lease:
            lease.check()
            # Every renewal fails from now on: the database is out of reach for the lease.
            pg_cluster.psql("DELETE FROM rollback_leases", database_of(pg_url))
            await asyncio.sleep(1.2)
            with pytest.raises(LeaseLost):
                lease.check()
    finally:
        await a.close()


@pytest.mark.parametrize(
    "stop",
    [
        "UPDATE sessions SET state='rolling_back'",
        "UPDATE sessions SET frozen=1",
        "INSERT INTO settings VALUES ('freeze_all', '1', 0)",
    ],
)
async def test_a_write_ahead_is_refused_when_the_database_says_the_session_stopped(
    pg_url: str, pg_cluster: Cluster, stop: str
) -> None:
    # Replica A has not heard of the rollback or freeze another replica committed: its cache
    # says open. The database decides; nothing is written, and A now knows.
    a = await PgJournal.connect(pg_url)
    try:
        a.add_session(Session(id="s1"))
        await a.writer.flush()
        pg_cluster.psql(stop, database_of(pg_url))
        assert a.sessions["s1"].state == "open" and not a.sessions["s1"].frozen
        step = a_step(a, "s1")
        with pytest.raises(SessionStopped):
            await a.write_ahead(step)
        assert await a.step(step.id) is None
        session = a.sessions["s1"]
        assert session.state != "open" or session.frozen or a.frozen_all
    finally:
        await a.close()


@pytest.mark.parametrize(
    "limit",
    [(None, "max_mutations", 3), (None, "max_mutations_per_minute", 3), ("r", "max_mutations", 3)],
)
async def test_a_budget_is_counted_over_every_replicas_steps(
    pg_url: str, limit: tuple[str | None, str, int]
) -> None:
    a, b = await two(pg_url)
    try:
        a.add_session(Session(id="s1"))
        await a.writer.flush()
        rule = limit[0]
        for journal in (a, b, a):  # three units taken through two replicas
            await journal.write_ahead(a_step(journal, "s1", rule=rule), limits=[limit])
        with pytest.raises(BudgetExceeded) as refused:
            await b.write_ahead(a_step(b, "s1", rule=rule), limits=[limit])
        assert (refused.value.limit, refused.value.value) == limit[1:]
        assert len(await a.steps("s1")) == 3  # the refused one was never written
        if rule is not None:  # another rule's budget is its own
            await b.write_ahead(a_step(b, "s1", rule="other"), limits=[("other", limit[1], 3)])
    finally:
        await a.close()
        await b.close()


async def test_a_forged_notification_changes_nothing(pg_url: str, pg_cluster: Cluster) -> None:
    # Any role that can LOGIN may pg_notify on the channel: the replica acts on what the
    # database says, never on what a notification says.
    a = await PgJournal.connect(pg_url)
    heard: list[tuple[str, dict[str, object]]] = []
    a.events.listen_remote(lambda kind, data: heard.append((kind, data)))
    try:
        forged = '{"r": "mallory", "e": [{"k": "freeze", "d": {"all": true}}]}'
        pg_cluster.psql(f"SELECT pg_notify('undoproxy', '{forged}')", database_of(pg_url))
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0.05)
        assert heard == [("freeze", {"all": False})]
        assert a.frozen_all is False
    finally:
        await a.close()
