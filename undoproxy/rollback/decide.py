"""Plan: what to do with one step before anything is sent, decided from the journal and reads.

`precheck` needs no network (never forwarded, resolved, irreversible, nothing to undo with its
evidence). Then, by what the step is:
- its agent request did not succeed (an error answer, a refusal, no answer): the answer is no
  evidence that nothing changed, so a read decides (`undecided`): the target as the snapshot
  shows -> skipped; changed and an inverse exists -> sent; else `unverified`;
- an earlier rollback sent its compensation (`compensating` after a crash, `unverified`, or
  an answer that may have applied): a read decides (`recheck.py`), never a blind resend;
- else the drift check (`before`): the target is read and compared with what the agent's write
  produced (conflict when someone changed it since), an inferred creation is confirmed to be
  there, and a target already as before is `compensated` — from the read, never assumed.
Each answers a Verdict (nothing is sent) or a Go.
"""

from __future__ import annotations

from typing import Any

from undoproxy import redact
from undoproxy.compensators.model import Snapshot
from undoproxy.compensators.record import NOTHING_EVIDENCE, CompensationRecord
from undoproxy.lifecycle import StepStatus
from undoproxy.rollback import compare
from undoproxy.rollback.compare import ABSENT, PRESENT, Read
from undoproxy.rollback.reader import Reader
from undoproxy.rollback.state import RESOLVE, Go, RunState, agent_outcome, outcome_said
from undoproxy.rollback.verdict import (
    Fact,
    JournalEvidence,
    ReadEvidence,
    Verdict,
    compensated,
    skipped,
)
from undoproxy.rollback.verify import Verifier
from undoproxy.store.records import Step

_FACTS: dict[str, Fact] = {"not_forwarded": "never_forwarded", "not_sent": "never_sent"}


def precheck(step: Step, comp: CompensationRecord) -> Verdict | None:
    """A verdict that needs no network, or None."""
    if step.compensation_status == "compensated" or step.status == StepStatus.COMPENSATED:
        return skipped(
            JournalEvidence("compensated_before"), "already compensated by an earlier rollback"
        )
    if step.status == StepStatus.RESOLVED:
        return skipped(JournalEvidence("resolved"), "resolved by a person")
    if step.status == StepStatus.DENIED:
        return skipped(JournalEvidence("never_forwarded"), "never forwarded (denied)")
    if step.status == StepStatus.HELD:
        return Verdict(
            "failed", "the request is still held for a decision; roll back again once it is"
        )
    if step.status == StepStatus.PENDING:
        return Verdict(
            "failed", "the request is still in flight; roll back again once it has completed"
        )
    if comp.nothing is not None:
        kind = comp.nothing.kind
        detail = comp.nothing.detail or NOTHING_EVIDENCE[kind]
        return skipped(JournalEvidence(_FACTS.get(kind, "recorded"), detail), comp.nothing.why)
    if comp.reason:
        return Verdict("irreversible", f"{comp.reason}; a person must undo this step by hand")
    if comp.request is None and agent_outcome(step) == "succeeded":
        return Verdict(
            "irreversible", "no compensation was recorded; a person must undo this step by hand"
        )
    return None


class Decider:
    """Decides, by reading, whether a step's compensation is sent."""

    def __init__(self, reader: Reader, verifier: Verifier) -> None:
        self.reader = reader
        self.verifier = verifier

    # --- the agent's request did not succeed ------------------------------------------------

    async def undecided(self, step: Step, comp: CompensationRecord) -> Verdict | Go:
        """An error answer, a refusal or no answer: did the step change the target anyway?"""
        said = outcome_said(step)
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is None and comp.readback is not None:
            return await self.undecided_pack(step, comp, comp.readback, said)
        if snap is None:
            if agent_outcome(step) == "unknown" and comp.request is None:
                return Verdict(
                    "irreversible",
                    f"{said}, and what it created cannot be identified; a person must undo this "
                    "step by hand",
                )
            return Verdict(
                "unverified",
                f"{said}; nothing undoproxy can read shows whether it changed anything (no "
                f"snapshot of its target), so nothing was sent: {RESOLVE}",
            )
        current = await self.reader.read(step, snap.url, snap)
        if current.state not in (PRESENT, ABSENT):
            return Verdict(
                "failed",
                f"{said}; the target could not be read to tell whether the request took "
                f"effect ({current.why}); nothing was sent, a later rollback reads it again",
            )
        assert current.response is not None
        found = compare.compare(snap, current.response)
        if not found:
            return skipped(
                ReadEvidence.of(current, "as before the step"),
                f"{said}; read back, the target is as it was before the step: the request did not "
                "take effect",
            )
        if comp.request is None:
            return Verdict(
                "unverified",
                f"{said}, and the target is not as it was before it ({'; '.join(found.describe())})"
                f"; undoproxy has no inverse for it: {RESOLVE}",
            )
        # It did change the target: undo it (there is no after-image to check drift against).
        return Go(current, note=f"{said}, but it changed the target: ")

    async def undecided_pack(
        self, step: Step, comp: CompensationRecord, spec: dict[str, Any], said: str
    ) -> Verdict | Go:
        """The same question, asked of a pack's read-back (what the targets were before the
        step): as before -> skipped; changed -> undone."""
        found = await self.verifier.read_back(step, spec)
        if found.state == "as_before":
            assert found.evidence is not None
            return skipped(
                found.evidence,
                f"{said}; read back, the target is as it was before the step ({found.seen}): "
                "the request did not take effect",
            )
        if found.state == "unsupported":
            return Verdict("unverified", f"{said}; {found.seen}: {RESOLVE}")
        if found.state == "unreadable":
            return Verdict(
                "failed",
                f"{said}; the target could not be read to tell whether the request took "
                f"effect ({found.seen}); nothing was sent, a later rollback reads it again",
            )
        return Go(note=f"{said}, but it changed the target: ")

    # --- a compensation that went out before ------------------------------------------------

    async def before(
        self, step: Step, comp: CompensationRecord, run: RunState, key: str | None
    ) -> Verdict | Go:
        """The first attempt: the chain of steps on one target, confirmation, drift."""
        newer = run.targets.get(key) if key else None
        if newer is not None:
            seq, verdict = newer
            if verdict.status in ("compensated", "planned"):
                # Compared once, against the newest step: this one follows its restore.
                return Go(etag=compare.strong_etag(verdict.etag))
            if verdict.status in ("conflict", "failed"):
                return Verdict(
                    verdict.status,
                    f"not attempted: the newer step #{seq} on the same target ended "
                    f"{verdict.status}; undo that one first",
                )
        if (
            comp.kind == "delete-created"
            and comp.request is not None
            and (comp.inferred or comp.located != "location")
        ):
            return await self.confirm_created(step, comp)
        drift = comp.readback is not None and (
            comp.readback.get("left") or comp.readback.get("left_gone")
        )
        if comp.readback is not None and drift and not run.force:
            return await self.drift_pack(step, comp.readback)
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        baseline = comp.after is not None or comp.check_absent or comp.kind == "restore"
        if snap is None or not baseline:
            return Go()
        current = await self.reader.read(step, snap.url, snap)
        if current.state not in (PRESENT, ABSENT):
            if run.force:
                return Go()
            return Verdict(
                "failed",
                f"could not re-read the target before compensating ({current.why}); nothing "
                "was sent, a later rollback will retry",
            )
        assert current.response is not None
        if not compare.compare(snap, current.response):
            return self.already_as_before(step, comp, snap, current)
        if run.force:
            return Go(current)
        if comp.check_absent:
            if current.state == PRESENT:
                return Verdict(
                    "conflict",
                    "the deleted resource exists again; nothing was overwritten (use --force "
                    "to recreate it anyway)",
                )
            return Go(current)
        if comp.after is None:  # no after-image: nothing to tell drift by
            return Go(current)
        changed = await self.changed_since(step, snap, current, comp.after)
        if changed:
            return Verdict(
                "conflict",
                f"the target changed since this step ({changed}); nothing was overwritten "
                "(use --force to restore anyway)",
            )
        return Go(current, compare.strong_etag(current.etag))

    def already_as_before(
        self, step: Step, comp: CompensationRecord, snap: Snapshot, current: Read
    ) -> Verdict:
        """The target reads as it was before the step. For a target that was absent before a
        write answered 200/204 (an update, not a creation), that only shows the undo done when
        a read right after the write found the target there: else the URL undoproxy reads may
        not be where the write went."""
        if not snap.existed and step.response_status != 201:
            seen = (comp.after or {}).get("exists")
            if seen is False:
                return Verdict(
                    "irreversible",
                    f"a GET of {redact.url(snap.url)} answered {snap.status} before the "
                    f"{step.method} and right after it, which answered {step.response_status} "
                    "(an update, not a creation): this URL does not show what it changed; a "
                    "person must undo it by hand",
                )
            if seen is not True:
                return Verdict(
                    "unverified",
                    f"the target reads as absent, as before the {step.method}, but the "
                    f"{step.method} answered {step.response_status} (an update, not a "
                    "creation) and was never seen at this URL, so this read does not show "
                    f"it undone: {RESOLVE}",
                )
        return compensated(
            ReadEvidence.of(current, "as before"),
            "the target is already as it was before this step (read back); nothing was sent",
            etag=current.etag,
        )

    async def changed_since(
        self, step: Step, snap: Snapshot, current: Read, after: dict[str, Any]
    ) -> str:
        """How the target differs from what the agent's write left ('' when it does not).

        Fields that change from one read to the next (a counter, a signed link) are not a
        change by someone else: when the JSON differs from the after-image, a second read
        tells them apart."""
        assert current.response is not None
        changed = compare.changed_since(current.response, after)
        if not changed or not after.get("body_b64"):
            return changed
        left = compare.after_body(after)
        fields = compare.json_fields_changed(left, current.response)
        if fields is None:
            return changed
        if not fields:
            return ""
        again = await self.reader.read(step, snap.url, snap)
        if again.response is None or again.state != PRESENT:
            return changed
        volatile = {d.path for d in compare.json_fields_changed_between(current, again)}
        still = [d for d in fields if d.path not in volatile]
        return f"body fields differ ({compare.describe_fields(still)})" if still else ""

    async def confirm_created(self, step: Step, comp: CompensationRecord) -> Verdict | Go:
        """A delete-created whose URL is a guess (the answer's id, or a Location not from a
        201): is there anything at it? Only a read that finds it there lets a DELETE go."""
        assert comp.request is not None
        request = comp.request
        current = await self.reader.read(step, request.url, None)
        if current.state == ABSENT:
            return Verdict(
                "irreversible",
                f"cannot confirm what the {step.method} created: undoproxy inferred "
                f"{redact.url(request.url)} from the response and it answers "
                f"{current.why.removeprefix('GET answered ')}; {RESOLVE}",
            )
        if current.state != PRESENT:
            return Verdict(
                "failed",
                f"could not read {redact.url(request.url)} to confirm what the "
                f"{step.method} created ({current.why}); nothing was sent, a later rollback "
                "will retry",
            )
        return Go(current, seen_present=True)

    async def drift_pack(self, step: Step, spec: dict[str, Any]) -> Verdict | Go:
        """Before a pack undo that overwrites fields: nobody changed them since the agent."""
        found = await self.verifier.read_back(step, spec)
        if found.state == "as_before":
            assert found.evidence is not None
            return compensated(
                found.evidence,
                f"the target is already as it was before this step (read back, {found.seen}); "
                "nothing was sent",
            )
        if found.state == "unreadable":
            return Verdict(
                "failed",
                f"could not re-read the target before compensating ({found.seen}); nothing was "
                "sent, a later rollback will retry",
            )
        if found.state == "differs" and not found.left:
            return Verdict(
                "conflict",
                f"the target changed since this step (it is neither as before it nor as it left "
                f"it: {found.seen}); nothing was overwritten (use --force to restore anyway)",
            )
        return Go()
