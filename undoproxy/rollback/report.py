"""What rollback tells: one verdict per mutation step, and the report of one run.

Report statuses (one per step, newest step first):
    compensated   a read-back shows the target as before the step (or, for what the step
                  created, gone): the only status that claims the step is undone
    unverified    an undo was sent and accepted, but nothing can show it took effect (no
                  snapshot to compare with, the target cannot be read back, or it came back
                  under a new URL); never sent again, a person checks and resolves it
    failed        not undone: the upstream refused or could not be reached, a read-back
                  differs from the snapshot (the detail says how), or undoproxy could not build
                  or send the request; a later rollback retries what is safe to retry
    conflict      the target changed since the agent's write: nothing was overwritten
    irreversible  no compensation exists, or the one inferred cannot be confirmed
    skipped       nothing to undo (never forwarded, failed upstream, did not take effect,
                  already compensated or resolved by a person)
    planned       dry run only: what the real run would send
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from undoproxy.store.records import Step

REPORT_STATUSES = (
    "compensated",
    "unverified",
    "failed",
    "conflict",
    "irreversible",
    "skipped",
    "planned",
)
# Only these leave a session `rolled_back`.
COMPLETE = frozenset({"compensated", "skipped"})
# Journal statuses of a mutation that leave nothing to undo: undone and shown so, undone by a
# person, or never took effect (never forwarded, failed upstream).
DONE_STATUSES = frozenset({"compensated", "resolved", "held", "denied", "failed"})
# The journal's step status for each report status (skipped leaves the step as it was).
JOURNAL_STATUS = {
    "compensated": "compensated",
    "unverified": "unverified",
    "failed": "compensation_failed",
    "conflict": "conflict",
    "irreversible": "irreversible",
}


def undone(step: Step) -> bool:
    """True when a step needs nothing more from a rollback: a read, or a mutation compensated,
    resolved by a person, or with nothing to undo (a rollback found it so: `skipped`)."""
    if not step.is_mutation:
        return True
    return step.status in DONE_STATUSES or step.compensation_status in COMPLETE


def fully_rolled_back(steps: Iterable[Step]) -> bool:
    """True when every mutation step of a session is undone, as the journal records it: the
    one test of `rolled_back` (after a rollback, and after a person resolves a step)."""
    return all(undone(step) for step in steps)


@dataclass
class Verdict:
    """What became of one step in one run: a report status and what a person should know."""

    status: str
    detail: str
    # The compensation record to store with the result (attempts counted), when it changed.
    compensation: dict[str, Any] | None = None
    # The ETag seen when the target was last read as restored (If-Match for an older step).
    etag: str | None = None


@dataclass
class Attempts:
    """What rollback did with a step's compensation so far; kept as `compensation["rollback"]`.

    `sent` counts the compensations started (each recorded durably before it went out);
    `answer` is the status of the last one's answer (None: no answer arrived, it may have
    been applied); `refused` says the answer refused it although it was 2xx (Slack `ok:
    false`); `recreated_at` is where a recreate's POST fallback put the resource.
    """

    sent: int = 0
    answer: int | None = None
    refused: bool = False
    recreated_at: str | None = None

    @classmethod
    def of(cls, comp: dict[str, Any]) -> Attempts:
        """The attempts recorded in a compensation record."""
        data = comp.get("rollback") or {}
        return cls(
            sent=int(data.get("sent") or 0),
            answer=data.get("answer"),
            refused=bool(data.get("refused")),
            recreated_at=data.get("recreated_at"),
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
