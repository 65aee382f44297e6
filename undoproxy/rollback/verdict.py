"""What rollback concludes about one step, and the evidence a conclusion must rest on.

Report statuses (one per mutation step, newest first):
    compensated   a read made by undoproxy after the undo shows the target as before the step
                  (or, for what the step created, gone): the only status that claims an undo
    skipped       nothing to undo, and the journal or a read shows it: never forwarded, never
                  reached the upstream, a read shows the target as before, already
                  compensated, resolved by a person
    unverified    an undo was sent and accepted, or the step may have changed something, but
                  nothing undoproxy can read shows what became of it; a person checks
    failed        not undone: refused, unreachable, a read-back differs (the detail says how)
    conflict      the target changed since the agent's write: nothing was overwritten
    irreversible  no compensation exists, or the one inferred cannot be confirmed
    planned       dry run only: what the real run would send

`compensated` and `skipped` cannot be built without evidence: `Verdict.__post_init__` refuses
them, so a branch that merely saw a status code cannot write one. Review a new path by
asking where its verdict's evidence came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from undoproxy import redact
from undoproxy.lifecycle import Settlement, StepStatus
from undoproxy.rollback.compare import Read

REPORT_STATUSES = (
    "compensated",
    "unverified",
    "failed",
    "conflict",
    "irreversible",
    "skipped",
    "planned",
)
# Only these leave a session `rolled_back`: each is built from evidence.
COMPLETE = frozenset({"compensated", "skipped"})
# The journal's step status for each report status (skipped leaves the step as it was).
JOURNAL_STATUS = {
    "compensated": StepStatus.COMPENSATED,
    "unverified": StepStatus.UNVERIFIED,
    "failed": StepStatus.COMPENSATION_FAILED,
    "conflict": StepStatus.CONFLICT,
    "irreversible": StepStatus.IRREVERSIBLE,
}


@dataclass(frozen=True)
class ReadEvidence:
    """A read undoproxy made of the target, and what it showed (`as before`, `gone`, ...)."""

    method: str
    url: str  # redacted
    status: int
    shows: str

    @classmethod
    def of(cls, read: Read, shows: str, method: str | None = None) -> ReadEvidence:
        """Evidence from an answered read (present or absent: the only states that show)."""
        if read.response is None or read.state not in ("present", "absent"):
            raise ValueError(f"an unreadable target shows nothing ({read.why})")
        return cls(method or read.method, redact.url(read.url), read.response.status, shows)

    def as_json(self) -> dict[str, Any]:
        """The report's form."""
        return {"read": f"{self.method} {self.url}", "status": self.status, "shows": self.shows}


Fact = Literal[
    "never_forwarded",  # undoproxy held, denied or answered it itself: nothing went upstream
    "never_sent",  # the connection to the upstream was never made
    "compensated_before",  # an earlier rollback read it back as undone
    "resolved",  # a person said it is undone, and who and why is recorded
    "recorded",  # the compensation record says why nothing changed (`nothing`, below)
]


@dataclass(frozen=True)
class JournalEvidence:
    """What the journal proves without a read."""

    fact: Fact
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        """The report's form."""
        return {"journal": self.fact, **({"detail": self.detail} if self.detail else {})}


Evidence = ReadEvidence | JournalEvidence


@dataclass
class Verdict:
    """What became of one step in one run: a report status and what a person should know."""

    status: str
    detail: str
    # The compensation record to store with the result (attempts counted), when it changed.
    compensation: dict[str, Any] | None = None
    # The ETag seen when the target was last read as restored (If-Match for an older step).
    etag: str | None = None
    # Where the verdict's claim comes from; required for compensated and skipped.
    evidence: Evidence | None = None

    def __post_init__(self) -> None:
        if self.status not in REPORT_STATUSES:
            raise ValueError(f"not a report status: {self.status!r}")
        if self.status == "compensated" and not isinstance(self.evidence, ReadEvidence):
            raise ValueError("`compensated` needs a read that shows the step undone")
        if self.status == "skipped" and self.evidence is None:
            raise ValueError("`skipped` needs the evidence that there is nothing to undo")

    @property
    def complete(self) -> bool:
        """True when the step needs nothing more (compensated or skipped)."""
        return self.status in COMPLETE

    @property
    def journal_status(self) -> StepStatus | None:
        """The step status this verdict leaves in the journal (None: as it was)."""
        return JOURNAL_STATUS.get(self.status)

    def settlement(self, otherwise: StepStatus | None = None) -> Settlement:
        """The verdict as `Journal.settle` records it; a verdict that leaves the step's status
        as it was writes `otherwise` (a step marked ahead goes back to its outcome)."""
        return Settlement(
            self.status,
            self.detail,
            self.journal_status or otherwise,
            self.evidence,
            self.compensation,
        )


def compensated(evidence: ReadEvidence, detail: str, etag: str | None = None) -> Verdict:
    """The step is undone: `evidence` is the read that shows it."""
    return Verdict("compensated", detail, etag=etag, evidence=evidence)


def skipped(evidence: Evidence, detail: str) -> Verdict:
    """Nothing to undo: `evidence` shows it."""
    return Verdict("skipped", detail, evidence=evidence)
