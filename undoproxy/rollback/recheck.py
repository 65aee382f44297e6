"""Plan, for a step whose compensation went out before: decided by reading, never resent blind.

A step an earlier rollback marked `compensating` and never settled (undoproxy stopped while
sending it), one it left `unverified`, or one whose last compensation's answer may have been
applied is read first: already as before -> `compensated` (nothing sent again); exactly as the
agent's step left it (the earlier undo did not take) -> sent again, where sending twice is safe;
neither -> `failed`, and a person (or `--force`) decides. With nothing to read, `unverified`.
"""

from __future__ import annotations

from typing import Any

from undoproxy.compensators.model import Snapshot
from undoproxy.compensators.record import CompensationRecord
from undoproxy.lifecycle import StepStatus
from undoproxy.rollback import compare
from undoproxy.rollback.compare import ABSENT, PRESENT, UNSUPPORTED, Read
from undoproxy.rollback.reader import Reader
from undoproxy.rollback.report import Attempts
from undoproxy.rollback.state import RESOLVE, Go, RunState
from undoproxy.rollback.verdict import ReadEvidence, Verdict, compensated
from undoproxy.rollback.verify import Verifier
from undoproxy.store.records import Step


class Recheck:
    """Decides, by reading, a step whose compensation may already have been applied."""

    def __init__(self, reader: Reader, verifier: Verifier) -> None:
        self.reader = reader
        self.verifier = verifier

    async def recheck(
        self, step: Step, comp: CompensationRecord, attempts: Attempts, run: RunState
    ) -> Verdict | Go:
        """A compensation went out before: decide by reading the target, never blind."""
        earlier = (
            "undoproxy stopped while undoing this step"
            if step.status == StepStatus.COMPENSATING
            else "an earlier rollback sent a compensation"
        )
        if attempts.recreated_at:
            return await self.verifier.recreated_before(step, comp, attempts, earlier)
        if comp.readback is not None:
            return await self.recheck_pack(step, comp, comp.readback, earlier)
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is not None:
            current = await self.reader.read(step, snap.url, snap)
            if current.state == UNSUPPORTED:
                return Verdict(
                    "unverified",
                    f"{earlier}; the target cannot be read back ({current.why}), so whether it "
                    f"took effect is unknown; it is never sent twice: {RESOLVE}",
                )
            if current.state not in (PRESENT, ABSENT):
                return Verdict(
                    "failed",
                    f"{earlier}; the target could not be read to tell whether it took effect "
                    f"({current.why}); nothing was sent, a later rollback reads it again",
                )
            assert current.response is not None
            restored = await self.verifier.as_before(step, comp, snap, current, None)
            if restored is not None:
                return compensated(
                    restored.evidence,
                    f"{earlier}; read back, {restored.shows}: nothing was sent again"
                    f"{restored.note}",
                    etag=current.etag,
                )
            diffs = compare.differences(snap, current.response)
            left = as_left(current, comp)
            method = comp.request.method if comp.request else ""
            if left or (run.force and method in ("PUT", "DELETE", "PATCH")):
                why = "the target is as the step left it" if left else "--force"
                note = f"{earlier} and it did not take effect ({why}): sent again; "
                return Go(current, compare.strong_etag(current.etag), note)
            state = (
                "neither as before this step nor as the step left it"
                if left is False
                else "not as before this step, and what the step left is unknown"
            )
            return Verdict(
                "failed",
                f"{earlier}; the target is {state} ({'; '.join(diffs)}); it was not sent "
                "again: check by hand (--force sends it again)",
            )
        if comp.request is not None and comp.request.method == "DELETE":
            current = await self.reader.read(step, comp.request.url, None)
            if current.state == ABSENT and (attempts.seen or comp.located == "location"):
                return compensated(
                    ReadEvidence.of(current, "gone"),
                    f"{earlier}; read back, it is gone ({current.why}): nothing was sent again",
                )
            if current.state == ABSENT:
                return Verdict(
                    "unverified",
                    f"{earlier}; it reads as gone ({current.why}), but nothing shows it was ever "
                    f"at this URL; it is never sent twice: {RESOLVE}",
                )
            if current.state == PRESENT:  # still there: the earlier DELETE did not apply
                return Go(
                    current,
                    note=f"{earlier} and it is still there: sent again; ",
                    seen_present=True,
                )
            return Verdict(
                "failed",
                f"{earlier}; the target could not be read to tell whether it took effect "
                f"({current.why}); nothing was sent, a later rollback reads it again",
            )
        return Verdict(
            "unverified",
            f"{earlier}, and whether it took effect cannot be read back (no snapshot to "
            f"compare with); it is never sent twice: {RESOLVE}",
        )

    async def recheck_pack(
        self, step: Step, comp: CompensationRecord, spec: dict[str, Any], earlier: str
    ) -> Verdict | Go:
        """A pack compensation that went out before: its read-back decides, never blind."""
        found = await self.verifier.read_back(step, spec)
        if found.state == "as_before":
            assert found.evidence is not None
            return compensated(
                found.evidence, f"{earlier}; read back, {found.seen}: nothing was sent again"
            )
        if found.state == "unsupported":
            return Verdict(
                "unverified", f"{earlier}; {found.seen}; it is never sent twice: {RESOLVE}"
            )
        if found.state == "unreadable":
            return Verdict(
                "failed",
                f"{earlier}; the target could not be read to tell whether it took effect "
                f"({found.seen}); nothing was sent, a later rollback reads it again",
            )
        if found.left or (comp.request is not None and comp.request.repeatable):
            why = "the target is as the step left it" if found.left else found.seen
            return Go(note=f"{earlier} and it did not take effect ({why}): sent again; ")
        return Verdict(
            "failed",
            f"{earlier}; {found.seen}; it is not safe to send twice, so it was not sent again: "
            f"{RESOLVE}",
        )

    # --- the first attempt -------------------------------------------------------------------


def as_left(current: Read, comp: CompensationRecord) -> bool | None:
    """Is the target as the agent's step left it? None when nothing says what that was."""
    assert current.response is not None
    if comp.check_absent:
        return current.state == ABSENT
    after = comp.after
    if not after:
        return None
    return compare.changed_since(current.response, after) == ""
