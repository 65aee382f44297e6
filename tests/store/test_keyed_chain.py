"""The keyed chain on both stores: whoever can write the database but lacks the chain key
cannot edit, insert, delete, move or append an entry, or rebuild the tail, without `verify`
saying so; a journal from before keyed chains is keyed when undoproxy opens it, and stays
verifiable."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet

from tests.store.backends import StoreUnderTest, _keys
from tests.store.helpers import a_step
from tests.store.test_chain import VERIFIED
from undoproxy.credentials import CredentialBox
from undoproxy.store import chain
from undoproxy.store.records import Session

COLUMNS = "seq, tbl, row_id, version, prev_hash, hash, key_id, row_hash"
Entry = tuple[Any, ...]  # as COLUMNS reads them


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


async def _entries(store: StoreUnderTest) -> list[Entry]:
    return await store.rows(f"SELECT {COLUMNS} FROM chain ORDER BY seq")


async def _append(store: StoreUnderTest, *entries: Entry) -> None:
    """Append entries (without their seq: the database numbers them, after the last)."""
    for entry in entries:
        values = ", ".join(_literal(v) for v in entry[1:])
        await store.sql(
            "INSERT INTO chain (tbl, row_id, version, prev_hash, hash, key_id, row_hash) "
            f"VALUES ({values})"
        )


async def _journal_with_steps(store: StoreUnderTest) -> list[Entry]:
    """Session s1 with three steps, each written ahead and then given its outcome."""
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        for _ in range(3):
            step = a_step(journal, "s1")
            await journal.write_ahead(step)
            journal.update(step, status="succeeded", response_status=201)
    finally:
        await journal.close()
    entries = await _entries(store)
    assert all(e[6] is not None and e[7] is not None for e in entries)  # every one keyed
    assert (await store.verify()).problems == []
    return entries


def _sha256_entry(prev: str, template: Entry) -> Entry:
    """An entry as one without the key makes it: the keyed columns of `template`, linked to
    `prev`, with a hash one can compute (SHA-256: the HMAC needs the key)."""
    _, table, row_id, version, _, _, key_id, row_digest = template
    digest = chain.entry_hash(prev, row_digest.encode())
    return (None, table, row_id, version, prev, digest, key_id, row_digest)


async def _edit_an_entry(store: StoreUnderTest, entries: list[Entry]) -> None:
    """An entry in the middle claims another content: its row_hash changed."""
    await store.sql(f"UPDATE chain SET row_hash='{'0' * 64}' WHERE seq={entries[3][0]}")


async def _edit_and_relink(store: StoreUnderTest, entries: list[Entry]) -> None:
    """An entry's hash changed, and the next entry's prev_hash with it: the links hold."""
    new = "f" * 64
    await store.sql(f"UPDATE chain SET hash='{new}' WHERE seq={entries[3][0]}")
    await store.sql(f"UPDATE chain SET prev_hash='{new}' WHERE seq={entries[4][0]}")


async def _delete_and_relink(store: StoreUnderTest, entries: list[Entry]) -> None:
    """An entry deleted, the next one linked to the one before it."""
    await store.sql(f"DELETE FROM chain WHERE seq={entries[3][0]}")
    await store.sql(f"UPDATE chain SET prev_hash='{entries[2][5]}' WHERE seq={entries[4][0]}")


async def _insert_in_the_middle(store: StoreUnderTest, entries: list[Entry]) -> None:
    """A forged entry between two, the tail put back after it, linked to it."""
    await store.sql(f"DELETE FROM chain WHERE seq>={entries[4][0]}")
    forged = _sha256_entry(entries[3][5], (*entries[1][:3], 3, *entries[1][4:]))
    await _append(store, forged)
    tail = [(*entries[4][:4], forged[5], *entries[4][5:]), *entries[5:]]
    await _append(store, *tail)


async def _append_unkeyed(store: StoreUnderTest, entries: list[Entry]) -> None:
    """The attack of issue 22: a step rewritten, and an SHA-256 entry appended for it."""
    step = entries[1]
    await store.sql(f"UPDATE steps SET url='https://attacker.test/' WHERE id='{step[2]}'")
    row = (await store.rows("SELECT hash FROM chain ORDER BY seq DESC LIMIT 1"))[0]
    await _append(store, (None, "steps", step[2], 9, row[0], "a" * 64, None, None))


async def _append_forged(store: StoreUnderTest, entries: list[Entry]) -> None:
    """The same, the entry dressed as a keyed one (the key's id is no secret)."""
    step = entries[1]
    await store.sql(f"UPDATE steps SET url='https://attacker.test/' WHERE id='{step[2]}'")
    await _append(store, _sha256_entry(entries[-1][5], (*step[:3], 9, *step[4:])))


async def _rebuild_the_tail(store: StoreUnderTest, entries: list[Entry]) -> None:
    """The newest entries cut and written again, with a key of one's own under the real id."""
    await store.sql(f"DELETE FROM chain WHERE seq>={entries[-3][0]}")
    mine = chain.ChainKey(b"k" * 32)
    prev = entries[-4][5]
    for entry in entries[-3:]:
        digest = mine.entry_hash(prev, entry[1], entry[2], entry[7])
        await _append(store, (*entry[:4], prev, digest, *entry[6:]))
        prev = digest


async def _move_two(store: StoreUnderTest, entries: list[Entry]) -> None:
    """Two neighbours swapped: each entry itself untouched."""
    await store.sql(f"DELETE FROM chain WHERE seq>={entries[3][0]}")
    await _append(store, entries[4], entries[3], *entries[5:])


TAMPERINGS: dict[str, Callable[[StoreUnderTest, list[Entry]], Awaitable[None]]] = {
    "edit an entry": _edit_an_entry,
    "edit an entry and relink": _edit_and_relink,
    "delete an entry and relink": _delete_and_relink,
    "insert an entry": _insert_in_the_middle,
    "append an unkeyed entry": _append_unkeyed,
    "append a forged keyed entry": _append_forged,
    "rebuild the tail": _rebuild_the_tail,
    "move an entry": _move_two,
}


@pytest.mark.parametrize("tamper", TAMPERINGS.values(), ids=TAMPERINGS.keys())
async def test_tampering_without_the_key_is_found(
    store: StoreUnderTest, tamper: Callable[[StoreUnderTest, list[Entry]], Awaitable[None]]
) -> None:
    entries = await _journal_with_steps(store)
    await tamper(store, entries)
    problems = (await store.verify()).problems
    assert problems, "verify found nothing"


async def test_without_its_key_nothing_keyed_is_vouched_for(store: StoreUnderTest) -> None:
    await _journal_with_steps(store)
    for keys in ({}, chain.keyring(CredentialBox(Fernet.generate_key()))):
        [problem] = (await store.verify(keys=keys)).problems
        assert "verify was not given" in problem.what


async def test_a_journal_from_before_keys_is_keyed_and_stays_checkable(
    store: StoreUnderTest,
) -> None:
    await store.before_keys()
    old = await store.rows("SELECT seq, tbl, row_id FROM chain ORDER BY seq")
    assert len(old) == 3
    report = await store.verify()
    assert (report.problems, report.keyed_from, report.unkeyed) == ([], None, 3)

    journal = await store.open()  # migrates, and keys the chain
    try:
        step = await journal.step("st2")
        assert step is not None
        await journal.settle(step, VERIFIED)
    finally:
        await journal.close()
    entries = await _entries(store)
    assert [(e[1], e[2]) for e in entries[3:]] == [("chain", "keyed"), ("steps", "st2")]
    report = await store.verify()
    assert (report.problems, report.unkeyed, report.entries) == ([], 3, 5)
    assert report.keyed_from == entries[3][0]
    assert report.key_ids == tuple(_keys())

    # The unkeyed part rewritten as anyone could (its rows and their SHA-256 entries): the
    # keying entry after it no longer fits.
    await store.sql("UPDATE steps SET url='https://attacker.test/' WHERE id='st1'")
    rows = {e[2]: e for e in old}
    prev = chain.GENESIS
    for table, row_id in (("sessions", "s1"), ("steps", "st1"), ("steps", "st2")):
        [values] = await store.rows(f"SELECT * FROM {table} WHERE id='{row_id}'")
        names = [n for (n,) in await _column_names(store, table)]
        digest = chain.entry_hash(prev, chain.canonical(table, zip(names, values, strict=True)))
        await store.sql(
            f"UPDATE chain SET prev_hash='{prev}', hash='{digest}' WHERE seq={rows[row_id][0]}"
        )
        prev = digest
    await store.sql(f"UPDATE chain SET prev_hash='{prev}' WHERE seq={entries[3][0]}")
    problems = (await store.verify()).problems
    assert any(p.table == "chain" and "does not verify" in p.what for p in problems), problems


async def _column_names(store: StoreUnderTest, table: str) -> list[tuple[str]]:
    if store.name == "sqlite":
        return [(r[1],) for r in await store.rows(f"PRAGMA table_info({table})")]
    return await store.rows(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
        f"current_schema() AND table_name = '{table}' ORDER BY ordinal_position"
    )
