"""What one rollback run knows as it goes, and what the phases hand each other.

A step goes through plan -> mark -> send -> verify (`decide.py`, `executor.py`, `send.py`,
`verify.py`). `decide` answers a Verdict (nothing to send) or a `Go`; the executor marks the
step `compensating` and `send` sends it; `verify` reads the target back.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from undoproxy.compensators.record import CompensationRecord
from undoproxy.lifecycle import StepStatus
from undoproxy.rollback.compare import Read
from undoproxy.rollback.outgoing import resource_url
from undoproxy.rollback.verdict import Verdict
from undoproxy.store.records import Step

RESOLVE = "check by hand, then `undoproxy resolve STEP`"
# The text a rule's `fails_when` puts first in a step's error (proxy/steps.py): the API refused
# the request inside a 2xx answer.
REFUSED_IN_ANSWER = "the API refused it in a 2xx answer"


@dataclass
class Go:
    """Send the compensation; `current` is the target as last read (for If-Match, `_rev`)."""

    current: Read | None = None
    etag: str | None = None  # a strong ETag the target is known to have right now
    note: str = ""  # why it is sent (again), put before what came of it
    seen_present: bool = False  # a read just showed the compensation's target present


@dataclass
class RunState:
    """One rollback run: its flags, and what it learned about each resource so far."""

    force: bool
    dry_run: bool
    # resource -> (seq, verdict) of the newest step of this run that wrote it
    targets: dict[str, tuple[int, Verdict]] = field(default_factory=dict)
    # results not yet written: they go in the same commit as the next `compensating` mark
    unwritten: list[Coroutine[Any, Any, None]] = field(default_factory=list)
    # steps already marked `compensating` ahead of their turn (see Rollback._mark_ahead)
    marked: set[str] = field(default_factory=set)
    # the WebDAV locks the session's own LOCK steps took (see rollback/locks.py)
    locks: list[tuple[str, str]] = field(default_factory=list)
    # step id -> its Turn in the lane while its undo runs (rollback/overlap.py)
    turns: dict[str, Any] = field(default_factory=dict)
    # step id -> (the journal's record, its typed form): parsed once per step and run
    records: dict[str, tuple[Any, CompensationRecord]] = field(default_factory=dict)

    def record(self, step: Step) -> CompensationRecord:
        """The step's compensation record, typed (parsed again only once the step's record
        was replaced, e.g. by a `compensating` mark)."""
        cached = self.records.get(step.id)
        if cached is None or cached[0] is not step.compensation:
            cached = (step.compensation, CompensationRecord.of(step.compensation))
            self.records[step.id] = cached
        return cached[1]


def target_key(url: str | None) -> str | None:
    """One name per resource: scheme, host, path and query, without version pins."""
    if not url:
        return None
    p = urlsplit(resource_url(url))
    return urlunsplit((p.scheme, p.netloc.lower(), p.path.rstrip("/") or "/", p.query, ""))


def agent_outcome(step: Step) -> str:
    """What the agent's own request came to, whatever a rollback wrote since: `succeeded`
    (a 2xx the API did not refuse), `failed` (any other answer) or `unknown` (no answer)."""
    if step.status == StepStatus.UNKNOWN or (
        step.response_status is None and step.status != StepStatus.FAILED
    ):
        return "unknown"
    status = step.response_status
    if status is None:
        return "unknown"
    if 200 <= status < 300 and not (step.error or "").startswith(REFUSED_IN_ANSWER):
        return "succeeded"
    return "failed"


def outcome_said(step: Step) -> str:
    """How a report names a step's outcome that was not a success."""
    if agent_outcome(step) == "unknown":
        return "the connection broke after the request may have been sent (outcome unknown)"
    if step.response_status and 200 <= step.response_status < 300:
        return f"the API refused it in its answer (HTTP {step.response_status})"
    return f"the upstream answered HTTP {step.response_status}"


def seen_where_written(step: Step, comp: CompensationRecord) -> bool | None:
    """For a target that read as absent before the agent's write: was the write seen at the
    URL undoproxy reads? True when it answered 201 (RFC 9110: created there) or a read right
    after it found the target; False when that read found nothing; None when unknown."""
    if step.response_status == 201:
        return True
    seen = (comp.after or {}).get("exists")
    return seen if isinstance(seen, bool) else None
