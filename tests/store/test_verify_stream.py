"""`verify` in constant memory: incremental from a head, a bounded list of problems, progress;
on both stores (`[sqlite]`, `[postgres]`)."""

from __future__ import annotations

import pytest

from tests.store.backends import PgStore, SqliteStore, StoreUnderTest, _keys
from tests.store.helpers import a_step
from tests.store.test_keyed_chain import COLUMNS, _append, _sha256_entry
from undoproxy.store import chainscan
from undoproxy.store.chainscan import Report
from undoproxy.store.postgres.verify import verify as pg_verify
from undoproxy.store.records import Session


async def _verify(store: StoreUnderTest, **options: object) -> Report:
    options.setdefault("keys", _keys())
    if isinstance(store, SqliteStore):
        return chainscan.verify_sqlite(store.path, **options)  # type: ignore[arg-type]
    assert isinstance(store, PgStore)
    return await pg_verify(store.url, **options)  # type: ignore[arg-type]


async def test_verify_since_a_head_checks_what_came_after_it(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        old = a_step(journal, "s1")
        await journal.write_ahead(old)
        head = (await _verify(store)).head
        new = a_step(journal, "s1")
        await journal.write_ahead(new)
        await journal.update_now(old, status="succeeded")  # changed after the head: checked
        await journal.writer.flush()
    finally:
        await journal.close()
    since = await _verify(store, since=head)
    assert since.problems == [] and since.since == head
    assert since.steps == 2 and since.entries == 2  # the two entries after the head
    await store.sql(f"UPDATE steps SET url='https://x.test/' WHERE id='{new.id}'")
    [problem] = (await _verify(store, since=head)).problems
    assert problem.row_id == new.id
    with pytest.raises(ValueError, match="is not in the chain"):
        await _verify(store, since="f" * 64)


async def test_only_so_many_problems_are_named(
    store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        for _ in range(5):
            await journal.write_ahead(a_step(journal, "s1"))
    finally:
        await journal.close()
    await store.sql("UPDATE steps SET status='irreversible'")
    monkeypatch.setattr(chainscan, "PROBLEMS_KEPT", 2)
    report = await _verify(store)
    assert len(report.problems) == 2 and report.more == 3
    seqs = [p.where for p in report.problems]
    assert seqs == ["session s1, #1", "session s1, #2"]  # the first ones, by position


def test_progress_is_said_every_so_often() -> None:
    said: list[tuple[str, int, int]] = []
    ticker = chainscan.Ticker(lambda *a: said.append(a), every=0)
    for n in range(1, 3000):
        ticker.tick("chain links", n, 3000)
    assert said == [("chain links", 1024, 3000), ("chain links", 2048, 3000)]
    quiet = chainscan.Ticker(None, every=0)
    quiet.tick("chain links", 1024, 3000)  # no progress asked for: nothing said


@pytest.mark.parametrize("how", ["unkeyed", "forged keyed"])
async def test_verify_since_a_keyed_head_checks_the_keys_after_it(
    store: StoreUnderTest, how: str
) -> None:
    """What came after a keyed head must be keyed, and verify with its key: an entry
    appended for an edited step without the key is found incrementally too."""
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        step = a_step(journal, "s1")
        await journal.write_ahead(step)
        head = (await _verify(store)).head
        await journal.write_ahead(a_step(journal, "s1"))
    finally:
        await journal.close()
    assert (await _verify(store, since=head)).problems == []
    await store.sql(f"UPDATE steps SET url='https://attacker.test/' WHERE id='{step.id}'")
    last = (await store.rows(f"SELECT {COLUMNS} FROM chain ORDER BY seq DESC LIMIT 1"))[0]
    forged = _sha256_entry(last[5], (None, "steps", step.id, 9, None, None, *last[6:]))
    await _append(store, forged if how == "forged keyed" else (*forged[:6], None, None))
    problems = (await _verify(store, since=head)).problems
    expected = "has no key, after keyed entries began" if how == "unkeyed" else "with its key"
    assert any(expected in p.what for p in problems), problems
