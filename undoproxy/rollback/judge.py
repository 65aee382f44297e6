"""Deciding by reading: what the target shows before a compensation, and after it.

Every decision here rests on a GET of the target (see `compare.py` for what counts as
evidence): the drift check before a first attempt, the re-check of a step whose compensation
may already have been applied, the confirmation of an inferred creation, and the read-back
that alone makes a step `compensated`. A read never decides from an unreadable answer.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from undoproxy import redact
from undoproxy.compensators import davcheck, readback, targets
from undoproxy.compensators.model import Snapshot, origin, parse_json
from undoproxy.compensators.record import CompensationRecord, InverseRequest
from undoproxy.credentials import CredentialBox
from undoproxy.retry import RetryPolicy
from undoproxy.rollback import compare
from undoproxy.rollback.compare import ABSENT, PRESENT, UNSUPPORTED, Read
from undoproxy.rollback.outgoing import Outgoing, read_request, resource_url
from undoproxy.rollback.report import Attempts, Verdict
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamClient, UpstreamError, UpstreamResponse

RESOLVE = "check by hand, then `undoproxy resolve STEP`"


@dataclass
class Go:
    """Send the compensation; `current` is the target as last read (for If-Match, `_rev`)."""

    current: Read | None = None
    etag: str | None = None  # a strong ETag the target is known to have right now
    note: str = ""  # why it is sent (again), put before what came of it


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


class Judge:
    """Reads targets with the step's credentials and decides what they show."""

    def __init__(self, client: UpstreamClient, box: CredentialBox, policy: RetryPolicy) -> None:
        self.client = client
        self.box = box
        self.policy = policy

    async def before(
        self, step: Step, comp: CompensationRecord, run: RunState, key: str | None
    ) -> Verdict | Go:
        """The first attempt: unknown outcomes, the chain of steps on one target, drift."""
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if step.status == "unknown":
            if snap is None:
                return Go()
            current = await self.read(step, snap.url, snap)
            if current.state not in (PRESENT, ABSENT):
                return Verdict(
                    "failed",
                    f"the outcome was unknown and the target could not be read to tell whether "
                    f"the request took effect ({current.why}); nothing was sent, a later "
                    "rollback reads it again",
                )
            assert current.response is not None
            if not compare.differences(snap, current.response):
                return Verdict(
                    "skipped",
                    "the outcome was unknown and the target is as it was before: the request "
                    "did not take effect",
                )
            return Go(current)  # it did take effect: undo it (no baseline to check drift)
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
        if comp.kind == "delete-created" and comp.inferred and comp.request is not None:
            return await self.confirm_created(step, comp.request)
        drift = comp.readback is not None and (
            comp.readback.get("left") or comp.readback.get("left_gone")
        )
        if comp.readback is not None and drift and not run.force:
            return await self.drift_pack(step, comp.readback)
        if run.force or snap is None or not (comp.after or comp.check_absent):
            return Go()
        current = await self.read(step, snap.url, snap)
        if current.state not in (PRESENT, ABSENT):
            return Verdict(
                "failed",
                f"could not re-read the target before compensating ({current.why}); nothing "
                "was sent, a later rollback will retry",
            )
        assert current.response is not None
        if not compare.differences(snap, current.response):
            return Verdict(
                "compensated",
                "the target is already as it was before this step (read back); nothing was sent",
                etag=current.etag,
            )
        if comp.check_absent:
            if current.state == PRESENT:
                return Verdict(
                    "conflict",
                    "the deleted resource exists again; nothing was overwritten (use --force "
                    "to recreate it anyway)",
                )
            return Go(current)
        changed = compare.changed_since(current.response, comp.after or {})
        if changed:
            return Verdict(
                "conflict",
                f"the target changed since this step ({changed}); nothing was overwritten "
                "(use --force to restore anyway)",
            )
        return Go(current, compare.strong_etag(current.etag))

    async def confirm_created(self, step: Step, request: InverseRequest) -> Verdict | Go:
        """An inferred delete-created: is there anything at the URL undoproxy guessed?"""
        current = await self.read(step, request.url, None)
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
        return Go(current)

    async def recheck(
        self, step: Step, comp: CompensationRecord, attempts: Attempts, run: RunState
    ) -> Verdict | Go:
        """A compensation went out before: decide by reading the target, never blind."""
        earlier = (
            "undoproxy stopped while undoing this step"
            if step.status == "compensating"
            else "an earlier rollback sent a compensation"
        )
        if attempts.recreated_at:
            return Verdict(
                "unverified",
                f"an earlier rollback sent a POST to recreate it ("
                f"{redact.url(attempts.recreated_at)}), under a new URL; a POST is never sent "
                f"twice: {RESOLVE}",
            )
        if comp.readback is not None:
            return await self.recheck_pack(step, comp, comp.readback, earlier)
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is not None:
            current = await self.read(step, snap.url, snap)
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
            diffs = compare.differences(snap, current.response)
            if not diffs:
                return Verdict(
                    "compensated",
                    f"{earlier}; read back, the target is as it was before this step: "
                    "nothing was sent again",
                    etag=current.etag,
                )
            left = as_left(current.response, comp)
            method = comp.request.method if comp.request else ""
            if left or (run.force and method in ("PUT", "DELETE", "PATCH")):
                why = "the target is as the step left it" if left else "--force"
                note = f"{earlier} and it did not take effect ({why}): sent again; "
                return Go(current, compare.strong_etag(current.etag), note)
            return Verdict(
                "failed",
                f"{earlier}; the target is neither as before this step nor as the step left "
                f"it ({'; '.join(diffs)}); it was not sent again: check by hand (--force "
                "sends it again)",
            )
        if comp.request is not None and comp.request.method == "DELETE":
            current = await self.read(step, comp.request.url, None)
            if current.state == ABSENT:
                return Verdict(
                    "compensated",
                    f"{earlier}; read back, it is gone ({current.why}): nothing was sent again",
                )
            if current.state == PRESENT:  # still there: the earlier DELETE did not apply
                return Go(current, note=f"{earlier} and it is still there: sent again; ")
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

    async def verify(
        self, step: Step, comp: CompensationRecord, out: Outgoing, answered: str
    ) -> Verdict:
        """Read the target back: only a read that shows the prior state makes it compensated."""
        if comp.readback is not None:
            state, seen, _ = await self.read_back(step, comp.readback)
            if state == "as_before":
                return Verdict("compensated", f"{answered}; read back: {seen}", etag=None)
            if state == "unsupported":
                return Verdict("unverified", f"{answered}, but {seen}: {RESOLVE}")
            if state == "unreadable":
                return Verdict(
                    "failed",
                    f"{answered}, but the target could not be read back to verify it ({seen}); "
                    "a later rollback reads it again",
                )
            return Verdict("failed", f"{answered}, but {seen}")
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is not None:
            current = await self.read(step, snap.url, snap)
        elif out.method == "DELETE":
            current = await self.read(step, out.url, None)
        else:
            return Verdict(
                "unverified",
                f"{answered}; there is no snapshot to compare with, so undoproxy cannot show "
                f"the step was undone: {RESOLVE}",
            )
        if current.state == UNSUPPORTED:
            return Verdict(
                "unverified",
                f"{answered}, but the target cannot be read back ({current.why}): {RESOLVE}",
            )
        if current.state not in (PRESENT, ABSENT):
            return Verdict(
                "failed",
                f"{answered}, but the target could not be read back to verify it "
                f"({current.why}); a later rollback reads it again",
            )
        assert current.response is not None
        if snap is None:
            if current.state == ABSENT:
                return Verdict("compensated", f"{answered}; read back: gone ({current.why})")
            return Verdict(
                "failed", f"{answered}, but it is still there ({current.why}); {RESOLVE}"
            )
        diffs = compare.differences(snap, current.response)
        if diffs:
            return Verdict(
                "failed",
                f"{answered}, but the target is not as it was before this step: {'; '.join(diffs)}",
            )
        seen = "gone" if not snap.existed else "matches the snapshot"
        return Verdict("compensated", f"{answered}; read back: {seen}", etag=current.etag)

    async def read_back(self, step: Step, spec: dict[str, Any]) -> tuple[str, str, bool]:
        """A pack's read-back (compensators/readback.py): (state, what was seen, left).

        state: as_before | differs | unreadable | unsupported. `left` is True when the target
        is exactly as the agent's step left it (the spec's `left` checks all hold).
        """
        if "targets" in spec:
            return await self.read_targets(step, spec)
        current = await self.read(step, str(spec.get("url") or ""), None)
        if current.state == UNSUPPORTED:
            return "unsupported", f"the target cannot be read back ({current.why})", False
        if current.state not in (PRESENT, ABSENT):
            return "unreadable", current.why, False
        left_checks = list(spec.get("left") or [])
        if current.state == ABSENT:
            # `left_gone`: the step deleted it, so gone is as the step left it
            if spec.get("gone"):
                return "as_before", f"gone ({current.why})", False
            return "differs", f"the target is gone ({current.why})", bool(spec.get("left_gone"))
        assert current.response is not None
        body = parse_json(current.response.body)
        left = bool(left_checks) and not readback.differences(left_checks, body)
        if spec.get("gone"):
            return "differs", f"it is still there ({current.why})", left
        checks = list(spec.get("expect") or [])
        diffs = readback.differences(checks, body)
        if diffs:
            why = f"the target is not as it was before this step: {'; '.join(diffs)}"
            return "differs", why, left
        fields = sorted({".".join(str(k) for k in c.get("path") or []) for c in checks} - {"ok"})
        return "as_before", f"as before ({', '.join(fields)})" if fields else "as before", left

    async def read_targets(self, step: Step, spec: dict[str, Any]) -> tuple[str, str, bool]:
        """A read-back over several targets (compensators/targets.py), as `read_back` says."""
        diffs: list[str] = []
        for check in spec.get("targets") or []:
            found = await self._target(step, check)
            if isinstance(found, tuple):
                return found
            diffs += found
        if diffs:  # as the step left it? (only asked when not as before)
            left_checks = list(spec.get("left") or [])
            left = bool(left_checks)
            for check in left_checks:
                found = await self._target(step, check)
                if isinstance(found, tuple) or found:
                    left = False
                    break
            return "differs", f"not as it was before this step: {'; '.join(diffs)}", left
        n = len(spec.get("targets") or [])
        return "as_before", f"{n} target{'s' if n != 1 else ''} as before", False

    async def _target(self, step: Step, check: dict[str, Any]) -> list[str] | tuple[str, str, bool]:
        """How one target differs from its check, or (state, why, False) when unreadable."""
        url = str(check.get("url") or "")
        if "propfind" in check:  # a WebDAV check (compensators/davcheck.py)
            headers, body = davcheck.propfind_request(check)
            current = await self.read(step, url, None, method="PROPFIND", extra=headers, body=body)
        else:
            current = await self.read(step, url, None)
        name = targets.label(url)
        if current.state == UNSUPPORTED:
            return "unsupported", f"{name} cannot be read back ({current.why})", False
        if current.state not in (PRESENT, ABSENT):
            return "unreadable", f"{name}: {current.why}", False
        assert current.response is not None
        resp = current.response
        if "propfind" in check:
            found = davcheck.differences(check, resp.status, resp.body)
        else:
            found = targets.differences(check, resp.status, resp.headers, resp.body)
        return [f"{name}: {d}" for d in found]

    async def drift_pack(self, step: Step, spec: dict[str, Any]) -> Verdict | Go:
        """Before a pack undo that overwrites fields: nobody changed them since the agent."""
        state, seen, left = await self.read_back(step, spec)
        if state == "as_before":
            return Verdict(
                "compensated",
                f"the target is already as it was before this step (read back, {seen}); "
                "nothing was sent",
            )
        if state == "unreadable":
            return Verdict(
                "failed",
                f"could not re-read the target before compensating ({seen}); nothing was sent, "
                "a later rollback will retry",
            )
        if state == "differs" and not left:
            return Verdict(
                "conflict",
                f"the target changed since this step (it is neither as before it nor as it left "
                f"it: {seen}); nothing was overwritten (use --force to restore anyway)",
            )
        return Go()

    async def recheck_pack(
        self, step: Step, comp: CompensationRecord, spec: dict[str, Any], earlier: str
    ) -> Verdict | Go:
        """A pack compensation that went out before: its read-back decides, never blind."""
        state, seen, left = await self.read_back(step, spec)
        if state == "as_before":
            return Verdict("compensated", f"{earlier}; read back, {seen}: nothing was sent again")
        if state == "unsupported":
            return Verdict("unverified", f"{earlier}; {seen}; it is never sent twice: {RESOLVE}")
        if state == "unreadable":
            return Verdict(
                "failed",
                f"{earlier}; the target could not be read to tell whether it took effect "
                f"({seen}); nothing was sent, a later rollback reads it again",
            )
        if left or (comp.request is not None and comp.request.repeatable):
            why = "the target is as the step left it" if left else seen
            return Go(note=f"{earlier} and it did not take effect ({why}): sent again; ")
        return Verdict(
            "failed",
            f"{earlier}; {seen}; it is not safe to send twice, so it was not sent again: {RESOLVE}",
        )

    async def verify_recreated(
        self,
        step: Step,
        comp: CompensationRecord,
        attempts: Attempts,
        fallback: Outgoing,
        resp: UpstreamResponse,
        first: int,
    ) -> Verdict:
        """A recreate that fell back to POST: the resource is back, but under a new URL."""
        where = resp.header("Location")
        how = f"recreated with POST to the collection (PUT answered {first})"
        if not where:
            attempts.recreated_at = fallback.url
            return Verdict(
                "unverified",
                f"{how}; no Location was given, so the new resource cannot be read back: {RESOLVE}",
                attempts.into(comp.raw),
            )
        url = urljoin(fallback.url, where)
        attempts.recreated_at = url
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        found = ""
        if snap is not None and origin(url) == origin(step.url):
            current = await self.read(step, url, snap)
            if current.state == PRESENT and current.response is not None:
                diffs = compare.differences(snap, current.response, ignore=("id", "_id"))
                found = (
                    "; its content matches the snapshot apart from its id"
                    if not diffs
                    else f"; it differs from the snapshot: {'; '.join(diffs)}"
                )
            else:
                found = f"; it cannot be read back ({current.why})"
        return Verdict(
            "unverified",
            f"{how}; new location {redact.url(url)}{found}; what referred to the old URL "
            f"must be fixed by hand: {RESOLVE}",
            attempts.into(comp.raw),
        )

    async def read(
        self,
        step: Step,
        url: str,
        snap: Snapshot | None,
        *,
        method: str = "GET",
        extra: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> Read:
        """GET the resource (never a pinned version of it) with the agent's credentials; or
        another read (`method`: a PROPFIND, with its `extra` headers and `body`)."""
        target = resource_url(url)
        accept = snap.content_type if snap is not None else None
        request = read_request(target, step.url, self.box.open(step.credentials), accept)
        try:
            resp = await self.client.send_with_retries(
                method, request.url, self.policy, {**request.headers, **(extra or {})}, body
            )
        except UpstreamError as exc:
            return Read(target, None, str(exc).replace(target, redact.url(target)))
        return Read(target, resp)


def as_left(current: UpstreamResponse, comp: CompensationRecord) -> bool | None:
    """Is the target as the agent's step left it? None when nothing says what that was."""
    if comp.check_absent:
        return current.status in (404, 410)
    after = comp.after
    if not after:
        return None
    return compare.changed_since(current, after) == ""
