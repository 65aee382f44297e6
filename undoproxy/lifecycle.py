"""A step's lifecycle: its statuses, the one table of moves between them, and who may make them.

    held ──> pending ──> succeeded ─┐
      │         │  └───> failed ────┼──> compensating ──> compensated | unverified |
      │         └──────> unknown ───┘         ▲            compensation_failed | conflict |
      └──> denied                             └──────────  irreversible ──> resolved

A mutation is `held` while a person decides, `pending` once it is written ahead (about to be
forwarded), then `succeeded`, `failed` (the upstream answered non-2xx, refused it in its answer,
or undoproxy answered it itself) or `unknown` (the connection broke after it may have been
sent). A rollback marks it `compensating` before it sends anything, and ends it with the
journal status of its verdict (`rollback/evidence.py`): `compensated` only from a read that
shows it undone. A person may resolve what rollback could not undo. A read is inserted
`succeeded` or `failed` and never moves.

`check(old, new)` is the table every status change goes through (`store.journal`): a change it
does not list is a bug of ours and raises IllegalTransition, so the journal never holds a
status no path could have reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from undoproxy.errors import UndoproxyError


class StepStatus(StrEnum):
    """The journal's status of a step (API, page, exports and CLI show these words)."""

    HELD = "held"
    DENIED = "denied"
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    COMPENSATING = "compensating"  # written (awaited) before a compensation is sent
    COMPENSATED = "compensated"  # a read-back showed the target as before the step
    UNVERIFIED = "unverified"  # an undo (or the step) cannot be shown to have had its effect
    COMPENSATION_FAILED = "compensation_failed"
    CONFLICT = "conflict"
    IRREVERSIBLE = "irreversible"
    RESOLVED = "resolved"  # a person undid it by hand


S = StepStatus
# What a step's agent request came to (the rollback's starting points).
OUTCOMES = frozenset({S.SUCCEEDED, S.FAILED, S.UNKNOWN})
# What a rollback may leave a step in (besides leaving it as it was: `skipped`).
ROLLBACK_ENDS = frozenset(
    {S.COMPENSATED, S.UNVERIFIED, S.COMPENSATION_FAILED, S.CONFLICT, S.IRREVERSIBLE}
)
# What a person may resolve: what rollback could not undo, and an outcome nobody knows.
RESOLVABLE = (S.IRREVERSIBLE, S.CONFLICT, S.COMPENSATION_FAILED, S.UNVERIFIED, S.UNKNOWN)

TRANSITIONS: dict[StepStatus, frozenset[StepStatus]] = {
    # approved (written ahead), denied / timed out / frozen, or refused by undoproxy itself
    S.HELD: frozenset({S.PENDING, S.DENIED, S.FAILED}),
    S.DENIED: frozenset(),
    # the answer, no answer, undoproxy's own refusal after the write-ahead, or the session
    # stopped (frozen, rolled back) between the write-ahead and forwarding
    S.PENDING: frozenset({S.SUCCEEDED, S.FAILED, S.UNKNOWN, S.DENIED}),
    # a late answer may still settle an outcome the proxy had to call unknown
    S.SUCCEEDED: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    S.FAILED: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    S.UNKNOWN: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    # marked ahead and never sent: back to its outcome; or a verdict
    S.COMPENSATING: frozenset({S.COMPENSATING, *OUTCOMES, *ROLLBACK_ENDS}),
    S.COMPENSATED: frozenset(),
    S.UNVERIFIED: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    S.COMPENSATION_FAILED: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    S.CONFLICT: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    S.IRREVERSIBLE: frozenset({S.COMPENSATING, *ROLLBACK_ENDS, S.RESOLVED}),
    S.RESOLVED: frozenset(),
}


class IllegalTransition(UndoproxyError):
    """A status change the lifecycle does not allow (a bug of undoproxy's, never the user's)."""


def check(old: str, new: str) -> StepStatus:
    """`new` as a StepStatus when a step in `old` may move to it (or stays in it); raises
    IllegalTransition otherwise."""
    try:
        before, after = StepStatus(old), StepStatus(new)
    except ValueError:
        raise IllegalTransition(f"unknown step status: {old!r} -> {new!r}") from None
    if after != before and after not in TRANSITIONS[before]:
        raise IllegalTransition(f"a step cannot go from {before} to {after}")
    return after


@dataclass(frozen=True)
class Settlement:
    """A rollback's verdict on one step as the journal records it (`Journal.settle`, the only
    way to write a verdict). Built by `rollback.verdict.Verdict.settlement()`; a verdict that
    claims the step needs nothing more (compensated, skipped) carries its evidence here too,
    so that even a caller that builds one by hand cannot record such a claim without it."""

    report: str  # the report status: compensated, skipped, failed, ...
    detail: str
    status: StepStatus | None  # the journal status it leaves (None: as it was)
    evidence: object | None = None
    compensation: dict[str, Any] | None = None  # the record with its attempts, when changed

    def __post_init__(self) -> None:
        if self.report in ("compensated", "skipped") and self.evidence is None:
            raise IllegalTransition(f"a `{self.report}` verdict needs its evidence")
        if self.status == StepStatus.COMPENSATED and self.report != "compensated":
            raise IllegalTransition("only a `compensated` verdict makes a step compensated")
