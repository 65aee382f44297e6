"""Retention that keeps the proof: archiving closed sessions out of the journal, on both
stores (`[sqlite]`, `[postgres]`): what remains still verifies and still shows tampering,
every entry archiving writes is keyed, and the archive file (its keyed entries checked with
the chain key) verifies on its own and against the journal."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.store.backends import StoreUnderTest, _keys
from tests.store.helpers import a_step, an_approval
from undoproxy.store import approvals, archivefile, archiving, chain
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session


async def _sessions(journal: Journal) -> float:
    """`old` (committed, with an approval) and `undone` (rolled back) closed before the
    returned time; `open` (a step before, one after) and `young` (closed after) stay."""
    for name in ("old", "undone", "open", "young"):
        journal.add_session(Session(id=name))
    await journal.write_ahead(a_step(journal, "open"))  # its entry is cut: chained again
    for _ in range(3):
        await journal.write_ahead(a_step(journal, "old", status="succeeded"))
    held = a_step(journal, "old", status="denied", action="hold")
    await journal.write_ahead(held)
    approval = an_approval("old", held)
    approval.state = "denied"
    await journal.writer.write(approvals.INSERT, approval.to_row())
    for _ in range(2):
        await journal.write_ahead(a_step(journal, "undone", status="compensated"))
    await journal.set_session_state("old", "committed")
    await journal.set_session_state("undone", "rolled_back")
    time.sleep(0.01)
    idle_before = time.time()
    time.sleep(0.01)
    await journal.write_ahead(a_step(journal, "young"))
    await journal.set_session_state("young", "committed")
    await journal.write_ahead(a_step(journal, "open"))
    return idle_before


async def test_archived_sessions_leave_and_the_rest_still_verifies(
    store: StoreUnderTest, tmp_path: Path
) -> None:
    journal = await store.open()
    try:
        idle_before = await _sessions(journal)
        dry = await archiving.archive(journal, idle_before=idle_before, to=None, dry_run=True)
        assert (dry.sessions, dry.steps, dry.approvals) == (2, 6, 1)
        assert await journal.step_counts(["old"]) != {}  # a dry run removes nothing
        to = tmp_path / "one.jsonl.gz"
        done = await archiving.archive(journal, idle_before=idle_before, to=to)
        assert (done.sessions, done.steps, done.approvals, done.file) == (2, 6, 1, str(to))
        assert done.carried >= 2  # `open` and its first step, chained again past the cut
        assert to.stat().st_mode & 0o777 == 0o600
        assert await journal.find_session("old") is None
        assert await journal.steps("undone") == []
        assert len(await journal.steps("open")) == 2
        report = await store.verify()
        assert report.problems == [] and report.steps == 3, report.problems
        # The survivors chained again and the archives row: keyed, like every entry.
        assert await store.rows("SELECT seq FROM chain WHERE key_id IS NULL") == []
        assert report.keyed_from is not None and report.unkeyed == 0
        await journal.write_ahead(a_step(journal, "open"))  # the journal goes on
        await journal.set_session_state("open", "committed")
        second = await archiving.archive(
            journal, idle_before=time.time() + 1, to=tmp_path / "two.jsonl.gz"
        )
        assert (second.sessions, second.steps) == (2, 4)
        report = await store.verify()
        assert report.problems == [] and (report.steps, report.sessions) == (0, 0)
        rows = await journal.query("SELECT id, file FROM archives ORDER BY chain_seq")
        assert [r["id"] for r in rows] == done.archives + second.archives
    finally:
        await journal.close()

    recorded = {
        r[0]: {"sha256": r[1], "chain_seq": r[2], "chain_hash": r[3]}
        for r in await store.rows("SELECT id, sha256, chain_seq, chain_hash FROM archives")
    }
    for name in ("one", "two"):
        checked = archivefile.check_file(tmp_path / f"{name}.jsonl.gz", keys=_keys())
        assert checked.problems == [] and len(checked.members) == 1 and checked.keyed
        assert archivefile.against_journal(checked, recorded) == []
    first = archivefile.check_file(tmp_path / "one.jsonl.gz", keys=_keys()).members[0]
    assert (first.sessions, first.steps, first.approvals) == (2, 6, 1)


async def test_tampering_after_an_archive_is_still_found(
    store: StoreUnderTest, tmp_path: Path
) -> None:
    journal = await store.open()
    try:
        idle_before = await _sessions(journal)
        await archiving.archive(journal, idle_before=idle_before, to=None)  # deleted, no file
    finally:
        await journal.close()
    [(survivor,)] = await store.rows("SELECT id FROM steps WHERE session_id='young'")
    await store.sql(f"UPDATE steps SET status='irreversible' WHERE id='{survivor}'")
    [problem] = (await store.verify()).problems
    assert (problem.row_id, problem.where) == (survivor, "session young, #1")
    await store.sql(f"UPDATE steps SET status='pending' WHERE id='{survivor}'")
    assert (await store.verify()).problems == []
    await store.sql("DELETE FROM archives")  # hiding what was removed
    problems = (await store.verify()).problems
    assert problems and any(p.table == "archives" for p in problems), problems


async def test_a_journal_that_does_not_verify_is_not_archived(
    store: StoreUnderTest, tmp_path: Path
) -> None:
    journal = await store.open()
    try:
        idle_before = await _sessions(journal)
        [(edited,)] = await store.rows("SELECT id FROM steps WHERE session_id='undone' LIMIT 1")
        await store.sql(f"UPDATE steps SET url='https://elsewhere.test/' WHERE id='{edited}'")
        with pytest.raises(archiving.ArchiveError, match="differs from what undoproxy journaled"):
            await archiving.archive(journal, idle_before=idle_before, to=tmp_path / "a.gz")
        assert len(await journal.steps("undone")) == 2
    finally:
        await journal.close()


async def test_a_session_that_changes_while_archived_stays(
    store: StoreUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await store.open()
    checked = archiving._no_gone_rows

    async def meanwhile(snap: object, base: int, cut: int) -> None:
        await checked(snap, base, cut)  # type: ignore[arg-type]
        journal.record(a_step(journal, "old", is_mutation=False, status="succeeded"))
        await journal.writer.flush()  # a read journaled into the committed session

    monkeypatch.setattr(archiving, "_no_gone_rows", meanwhile)
    try:
        idle_before = await _sessions(journal)
        to = tmp_path / "raced.jsonl.gz"
        with pytest.raises(archiving.ArchiveError, match="changed meanwhile"):
            await archiving.archive(journal, idle_before=idle_before, to=to)
        assert len(await journal.steps("old")) == 5
        assert to.stat().st_size == 0  # the batch was taken back out of the file
    finally:
        await journal.close()
    assert (await store.verify()).problems == []


async def test_an_edited_archive_file_is_found(store: StoreUnderTest, tmp_path: Path) -> None:
    journal = await store.open()
    try:
        idle_before = await _sessions(journal)
        to = tmp_path / "a.jsonl.gz"
        await archiving.archive(journal, idle_before=idle_before, to=to)
    finally:
        await journal.close()
    original = gzip.decompress(to.read_bytes()).decode().splitlines()
    lines = list(original)
    for n, line in enumerate(lines):
        value = json.loads(line)
        if value.get("row") == "steps":
            value["values"]["status"] = "irreversible"
            lines[n] = json.dumps(value, separators=(",", ":"))
            break
    edited = tmp_path / "edited.jsonl.gz"
    edited.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    [problem] = archivefile.check_file(edited, keys=_keys()).problems
    assert "its content differs from its chain entry" in problem
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(("\n".join(original[:-1]) + "\n").encode()))
    assert "no end" in archivefile.check_file(cut, keys=_keys()).problems[0]


def _resealed(values: list[dict[str, Any]]) -> bytes:
    """An archive file of these lines, each batch's digest recomputed over them (what anyone
    can do; the entries' HMACs need the key)."""
    texts = []
    digest = hashlib.sha256()
    for value in values:
        if "end" in value:
            value["end"]["sha256"] = digest.hexdigest()
            digest = hashlib.sha256()
            texts.append(json.dumps(value, separators=(",", ":")))
            continue
        texts.append(json.dumps(value, separators=(",", ":")))
        digest.update(texts[-1].encode() + b"\n")
    return gzip.compress(("\n".join(texts) + "\n").encode())


async def test_an_archive_file_carries_keyed_entries_that_cannot_be_forged(
    store: StoreUnderTest, tmp_path: Path
) -> None:
    journal = await store.open()
    try:
        idle_before = await _sessions(journal)
        to = tmp_path / "a.jsonl.gz"
        await archiving.archive(journal, idle_before=idle_before, to=to)
    finally:
        await journal.close()
    values = [json.loads(line) for line in gzip.decompress(to.read_bytes()).splitlines()]
    assert values[0]["undoproxy_archive"] == 2
    entries = [v["entry"] for v in values if "entry" in v]
    assert entries and all(len(e) == 8 and e[6] in _keys() for e in entries)
    forged = tmp_path / "forged.jsonl.gz"
    forged.write_bytes(_resealed(values))  # as written: it checks
    assert archivefile.check_file(forged, keys=_keys()).problems == []
    # A step edited, its entry's row_hash made to match, the digest recomputed: the entry's
    # HMAC no longer verifies.
    for n, value in enumerate(values):
        if value.get("row") == "steps":
            value["values"]["status"] = "irreversible"
            row = {k: archiving.decode(v) for k, v in value["values"].items()}
            values[n - 1]["entry"][7] = chain.row_hash(chain.canonical("steps", row.items()))
            break
    forged.write_bytes(_resealed(values))
    [problem] = archivefile.check_file(forged, keys=_keys()).problems
    assert "does not verify with its key" in problem, problem
    [unchecked] = archivefile.check_file(to).problems  # without the key it cannot be checked
    assert "verify was not given" in unchecked


def test_an_archive_file_from_before_keyed_chains_still_checks(tmp_path: Path) -> None:
    """Format 1 (unkeyed entries, six fields): checked as SHA-256, and said to be unkeyed."""
    row = {"id": "s1", "token": "t", "state": "committed", "created_at": 1.0}
    digest = chain.entry_hash(chain.GENESIS, chain.canonical("sessions", row.items()))
    lines = [
        {
            "undoproxy_archive": 1,
            "id": "ar_1",
            "cut_before": {"seq": 0, "hash": chain.GENESIS},
            "cut": {"seq": 1},
            "sessions": ["s1"],
        },
        {"entry": [1, "sessions", "s1", 1, chain.GENESIS, digest]},
        {"row": "sessions", "values": row},
    ]
    texts = [json.dumps(v, separators=(",", ":")) for v in lines]
    sha = hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()
    end = {"entries": 1, "cut": {"seq": 1, "hash": digest}, "sessions": 1, "steps": 0}
    texts.append(json.dumps({"end": {**end, "approvals": 0, "sha256": sha}}))
    old = tmp_path / "old.jsonl.gz"
    old.write_bytes(gzip.compress(("\n".join(texts) + "\n").encode()))
    checked = archivefile.check_file(old, keys=_keys())
    assert checked.problems == [] and not checked.keyed and len(checked.members) == 1
    row["state"] = "open"
    texts[2] = json.dumps({"row": "sessions", "values": row}, separators=(",", ":"))
    old.write_bytes(gzip.compress(("\n".join(texts) + "\n").encode()))
    assert "differs" in archivefile.check_file(old, keys=_keys()).problems[0]


async def test_a_chain_with_a_forged_entry_is_not_archived(
    store: StoreUnderTest, tmp_path: Path
) -> None:
    """Archiving checks every entry it cuts with the chain key: an entry edited and relinked
    (the links hold) is refused, and nothing leaves the journal."""
    journal = await store.open()
    try:
        idle_before = await _sessions(journal)
        [(seq,)] = await store.rows(
            "SELECT min(c.seq) FROM chain c JOIN steps s ON s.id = c.row_id "
            "WHERE s.session_id = 'old'"
        )
        await store.sql(f"UPDATE chain SET hash='{'f' * 64}' WHERE seq={seq}")
        await store.sql(f"UPDATE chain SET prev_hash='{'f' * 64}' WHERE seq={seq + 1}")
        with pytest.raises(archiving.ArchiveError, match="does not verify with its key"):
            await archiving.archive(journal, idle_before=idle_before, to=tmp_path / "a.gz")
        assert len(await journal.steps("old")) == 4
    finally:
        await journal.close()
