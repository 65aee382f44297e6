"""What rollback tells: the report of one run, and what the journal keeps of each step's undo.

The statuses and the evidence each rests on: `verdict.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from undoproxy.lifecycle import StepStatus
from undoproxy.rollback.verdict import COMPLETE, Evidence
from undoproxy.store.records import Step

# Journal statuses of a mutation that leave nothing to undo: undone and shown so by a read,
# undone by a person, or never forwarded (denied). A `held` step is not among them: until
# its approval is decided it may still go out (a rollback denies it first).
DONE_STATUSES = frozenset({StepStatus.COMPENSATED, StepStatus.RESOLVED, StepStatus.DENIED})


def undone(step: Step) -> bool:
    """True when a step needs nothing more from a rollback: a read, or a mutation compensated,
    resolved by a person, never forwarded, or with nothing to undo as a rollback found with
    evidence (`skipped`)."""
    if not step.is_mutation:
        return True
    return step.status in DONE_STATUSES or step.compensation_status in COMPLETE


def fully_rolled_back(steps: Iterable[Step]) -> bool:
    """True when every mutation step of a session is undone, as the journal records it: the
    one test of `rolled_back` (after a rollback, and after a person resolves a step)."""
    return all(undone(step) for step in steps)


@dataclass
class Attempts:
    """What rollback did with a step's compensation so far; kept as `compensation["rollback"]`.

    `sent` counts the compensations started (each recorded durably before it went out);
    `answer` is the status of the last one's answer (None: no answer arrived, it may have
    been applied); `refused` says the answer refused it although it was 2xx (Slack `ok:
    false`); `recreated_at` is where a recreate's POST fallback put the resource; `seen`
    says a read by undoproxy found the compensation's target there before it was sent (what
    lets a DELETE answered 404 count as "gone").
    """

    sent: int = 0
    answer: int | None = None
    refused: bool = False
    recreated_at: str | None = None
    seen: bool = False

    @classmethod
    def of(cls, comp: dict[str, Any]) -> Attempts:
        """The attempts recorded in a compensation record."""
        data = comp.get("rollback") or {}
        return cls(
            sent=int(data.get("sent") or 0),
            answer=data.get("answer"),
            refused=bool(data.get("refused")),
            recreated_at=data.get("recreated_at"),
            seen=bool(data.get("seen")),
        )

    def into(self, comp: dict[str, Any]) -> dict[str, Any]:
        """The compensation record with these attempts in it."""
        return {**comp, "rollback": self.as_json()}

    def as_json(self) -> dict[str, Any]:
        """How a compensation record keeps them (under `rollback`)."""
        return {
            "sent": self.sent,
            "answer": self.answer,
            "refused": self.refused,
            "recreated_at": self.recreated_at,
            "seen": self.seen,
        }

    @property
    def may_have_applied(self) -> bool:
        """True when an earlier compensation went out and no answer proves it was not applied.

        A 4xx answer (other than 408 and 429) means the upstream refused the request.
        """
        if self.sent == 0:
            return False
        if self.refused:
            return False
        answer = self.answer
        return not (answer is not None and 400 <= answer < 500 and answer not in (408, 429))


@dataclass
class StepResult:
    """What rollback did with one mutation step."""

    id: str
    seq: int
    method: str
    url: str
    status: str
    detail: str
    compensation: dict[str, str] | None = None
    evidence: Evidence | None = None  # the read (or journal fact) the status rests on

    def to_json(self) -> dict[str, Any]:
        """The report entry (URLs redacted)."""
        return {
            "id": self.id,
            "seq": self.seq,
            "method": self.method,
            "url": self.url,
            "status": self.status,
            "detail": self.detail,
            "compensation": dict(self.compensation) if self.compensation else None,
            "evidence": self.evidence.as_json() if self.evidence is not None else None,
        }


@dataclass
class Report:
    """The outcome of one rollback."""

    session: str
    state: str
    steps: list[StepResult] = field(default_factory=list)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The API's answer: `{state, steps: [{id, status, detail}, ...]}` and more."""
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.status] = counts.get(s.status, 0) + 1
        return {
            "session": self.session,
            "state": self.state,
            "dry_run": self.dry_run,
            "counts": counts,
            "steps": [s.to_json() for s in self.steps],
        }
