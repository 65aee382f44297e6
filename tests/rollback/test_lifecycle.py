"""A false verdict cannot be written: the lifecycle's table, verdicts that need evidence, and the
journal refusing both (pure, and on a real SQLite journal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.store.helpers import a_step
from undoproxy.compensators.model import Snapshot
from undoproxy.lifecycle import IllegalTransition, Settlement, StepStatus, check
from undoproxy.rollback import compare
from undoproxy.rollback.compare import Read, server_set
from undoproxy.rollback.verdict import JournalEvidence, ReadEvidence, Verdict
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session
from undoproxy.upstream import UpstreamResponse

S = StepStatus


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.HELD, S.PENDING),
        (S.HELD, S.DENIED),
        (S.PENDING, S.SUCCEEDED),
        (S.PENDING, S.UNKNOWN),
        (S.PENDING, S.DENIED),  # the session stopped between the write-ahead and forwarding
        (S.SUCCEEDED, S.COMPENSATING),
        (S.FAILED, S.COMPENSATING),  # a failed request is decided too: it may have landed
        (S.COMPENSATING, S.COMPENSATED),
        (S.COMPENSATING, S.SUCCEEDED),  # marked ahead, never sent
        (S.CONFLICT, S.RESOLVED),
        (S.UNVERIFIED, S.COMPENSATING),
    ],
)
def test_the_moves_a_step_makes(old: StepStatus, new: StepStatus) -> None:
    assert check(old, new) == new


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.HELD, S.SUCCEEDED),  # never forwarded, never answered
        (S.DENIED, S.PENDING),  # a denied request never goes out later
        (S.PENDING, S.COMPENSATED),  # nothing undone before it was even answered
        (S.COMPENSATED, S.COMPENSATING),  # a verified undo is never sent again
        (S.COMPENSATED, S.FAILED),
        (S.RESOLVED, S.COMPENSATING),  # a person's resolution is final
        (S.SUCCEEDED, S.HELD),
    ],
)
def test_the_moves_no_path_may_make(old: StepStatus, new: StepStatus) -> None:
    with pytest.raises(IllegalTransition):
        check(old, new)


def test_every_status_has_a_row_in_the_table() -> None:
    from undoproxy.lifecycle import TRANSITIONS

    assert set(TRANSITIONS) == set(StepStatus)


READ = Read("https://api.test/x", UpstreamResponse(404, {}, b""))


@pytest.mark.parametrize("status", ["compensated", "skipped"])
def test_a_claim_that_a_step_is_done_needs_evidence(status: str) -> None:
    with pytest.raises(ValueError):
        Verdict(status, "the DELETE answered 204")  # a status code is not evidence
    with pytest.raises(IllegalTransition):
        Settlement(status, "no", S.COMPENSATED if status == "compensated" else None)


def test_compensated_needs_a_read_a_journal_fact_will_not_do() -> None:
    with pytest.raises(ValueError):
        Verdict("compensated", "x", evidence=JournalEvidence("never_forwarded"))
    assert Verdict("compensated", "x", evidence=ReadEvidence.of(READ, "gone")).complete


def test_an_unreadable_target_is_no_evidence() -> None:
    unreadable = Read("https://api.test/x", UpstreamResponse(503, {}, b""))
    with pytest.raises(ValueError):
        ReadEvidence.of(unreadable, "as before")


async def test_the_journal_writes_a_verdict_only_through_settle(tmp_path: Path) -> None:
    journal = await Journal.open(tmp_path / "j.db")
    try:
        journal.add_session(Session(id="s"))
        step = a_step(journal, "s")
        await journal.write_ahead(step)
        await journal.update_now(step, status="succeeded")
        with pytest.raises(IllegalTransition):
            await journal.update_now(step, status="compensated")
        with pytest.raises(IllegalTransition):
            journal.update(step, compensation_status="skipped")
        with pytest.raises(IllegalTransition):
            await journal.update_now(step, status="held")
        evidence = ReadEvidence.of(READ, "gone")
        await journal.settle(
            step, Verdict("compensated", "read back: gone", evidence=evidence).settlement()
        )
        stored = await journal.step(step.id)
        assert stored is not None
        assert (stored.status, stored.compensation_status) == ("compensated", "compensated")
    finally:
        await journal.close()


# --- what the server sets, told apart by evidence --------------------------------------------

SNAP = {"name": "Ada", "updated_at": 1, "revision": 1, "meta": {"etag": "a", "owner": "x"}}


def _fields(now: dict[str, Any]) -> list[compare.FieldDiff]:
    found = compare.compare(
        Snapshot("u", 200, compare_json(SNAP)), UpstreamResponse(200, {}, compare_json(now))
    )
    return found.fields


def compare_json(doc: Any) -> bytes:
    import json

    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("now", "agent", "by_server", "not_restored"),
    [
        # a third value where the undo sent the old one: the server's
        (
            {**SNAP, "updated_at": 3, "revision": 3},
            [{"name": "Eve"}],
            ["updated_at", "revision"],
            [],
        ),
        # the agent's value is still there: not restored, whatever the server sets too
        ({**SNAP, "name": "Eve", "updated_at": 3}, [{"name": "Eve"}], ["updated_at"], ["name"]),
        # nested (Kinto's data.last_modified style)
        ({**SNAP, "meta": {"etag": "c", "owner": "x"}}, [{"name": "Eve"}], ["meta.etag"], []),
        # a field that went missing or appeared was not restored
        ({k: v for k, v in SNAP.items() if k != "revision"}, [{}], [], ["revision"]),
        ({**SNAP, "extra": 1}, [{}], [], ["extra"]),
        # the agent's value as its answer showed it counts as what it left
        ({**SNAP, "updated_at": 2}, [{"name": "Eve"}, {"updated_at": 2}], [], ["updated_at"]),
    ],
    ids=["third-value", "agent-value-stays", "nested", "missing", "added", "answer-value"],
)
def test_server_set_fields(
    now: dict[str, Any], agent: list[Any], by_server: list[str], not_restored: list[str]
) -> None:
    server, rest = server_set(_fields(now), SNAP, agent)
    assert sorted(d.name for d in server) == sorted(by_server)
    assert sorted(d.name for d in rest) == sorted(not_restored)


def test_nothing_is_server_set_when_the_agent_wrote_what_cannot_be_read() -> None:
    server, rest = server_set(_fields({**SNAP, "updated_at": 3}), SNAP, None)
    assert server == [] and [d.name for d in rest] == ["updated_at"]


@pytest.mark.parametrize(
    ("body", "gone"),
    [
        (b'{"id": "cus_1", "object": "customer", "deleted": true}', True),  # Stripe
        (b'{"data": {"id": "r1", "last_modified": 9, "deleted": true}}', True),  # Kinto
        (b'{"id": "u1", "name": "Ada", "deleted": true}', False),  # a soft-delete flag
        (b'{"deleted": false, "id": "x"}', False),
    ],
)
def test_a_tombstone_is_absence(body: bytes, gone: bool) -> None:
    read = Read("https://api.test/x", UpstreamResponse(200, {}, body))
    assert (read.state == compare.ABSENT) is gone
