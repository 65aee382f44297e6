"""Steps and approvals to journal in the store tests."""

from __future__ import annotations

import time

from undoproxy.store import approvals
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step, new_id


def a_step(journal: Journal, session: str, **values: object) -> Step:
    fields: dict[str, object] = {
        "method": "POST",
        "url": "https://api.test/items",
        "is_mutation": True,
        "status": "pending",
        "request_headers": [["content-type", "application/json"]],
        "request_body": b'{"name": "x"}\xff',
        **values,
    }
    return Step(id=new_id("st"), session_id=session, seq=journal.next_seq(session), **fields)  # type: ignore[arg-type]


def an_approval(session: str, step: Step) -> approvals.Approval:
    return approvals.Approval(
        id=new_id("ap"),
        session_id=session,
        step_id=step.id,
        fingerprint="f",
        method="POST",
        url="https://api.test/items",
        created_at=time.time(),
        expires_at=time.time() + 60,
        step_ids=[step.id],
    )
