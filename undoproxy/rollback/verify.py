"""Verify: read the target back after its compensation was accepted; only that read can make a
step `compensated`.

What "as before" means (docs/rollback.md has the table):
- the read matches the snapshot: body (JSON as JSON, or the bytes as stored, content codings
  kept) and the representation headers; for what the step created, the target is absent (404,
  410, or a tombstone);
- or it differs only in fields the server sets on every write, shown so by evidence
  (`compare.server_set`: the undo sent the field, the server answered a third value) or named
  by a pack: `compensated`, and the detail names them;
- a DELETE answered 404 shows nothing by itself: the target must have been seen there (the
  DELETE's own 2xx, a read that found it, or a 201's Location naming it).
Anything else is `failed` (the detail names what differs), `unverified` (nothing can be read
back) or, when the target cannot be read at all, `failed` with a later rollback to read again.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from undoproxy import redact
from undoproxy.compensators import davcheck, readback, targets
from undoproxy.compensators.model import Snapshot, origin, parse_json
from undoproxy.compensators.record import CompensationRecord
from undoproxy.rollback import compare
from undoproxy.rollback.compare import ABSENT, PRESENT, UNSUPPORTED, Read
from undoproxy.rollback.outgoing import Outgoing
from undoproxy.rollback.reader import Reader
from undoproxy.rollback.report import Attempts
from undoproxy.rollback.state import RESOLVE, seen_where_written, target_key
from undoproxy.rollback.verdict import ReadEvidence, Verdict, compensated
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamResponse

# The agent's own documents of a step (its request and answer as JSON, the after-image), or
# None when it wrote something undoproxy cannot read field by field.
AgentDocs = Callable[[Step], Awaitable[list[Any] | None]]


@dataclass
class Restored:
    """A read that shows the target as before: its evidence, and what a report adds."""

    evidence: ReadEvidence
    shows: str  # "matches the snapshot", "gone"
    note: str = ""  # "; server-set fields differ: last_modified"


@dataclass
class Found:
    """What a pack's read-back found: as_before | differs | unreadable | unsupported."""

    state: str
    seen: str
    left: bool = False  # the target is exactly as the agent's step left it
    evidence: ReadEvidence | None = None


class Verifier:
    """Reads targets back and says whether they are as before."""

    def __init__(self, reader: Reader, agent_docs: AgentDocs) -> None:
        self.reader = reader
        self.agent_docs = agent_docs

    async def as_before(
        self,
        step: Step,
        comp: CompensationRecord,
        snap: Snapshot,
        current: Read,
        sent: bytes | None,
    ) -> Restored | None:
        """The read shows the snapshot's state (see the module docstring), or None."""
        restored, _ = await self.restored(step, comp, snap, current, sent)
        return restored

    async def restored(
        self,
        step: Step,
        comp: CompensationRecord,
        snap: Snapshot,
        current: Read,
        sent: bytes | None,
    ) -> tuple[Restored | None, list[str]]:
        """(what shows it restored, None when it is not; what differs, named, when not).

        `sent` is the body the undo wrote (None: the compensation record's own body)."""
        assert current.response is not None
        found = compare.compare(snap, current.response)
        if not found:
            shows = "matches the snapshot" if snap.existed else "gone"
            return Restored(ReadEvidence.of(current, shows), shows), []
        if found.other or not found.fields or not snap.existed:
            return None, found.describe()
        body = sent if sent is not None else _body(comp)
        named = [d for d in found.fields if d.name in comp.server_fields]
        rest = [d for d in found.fields if d.name not in comp.server_fields]
        by_server, not_restored = compare.server_set(
            rest, parse_json(body), await self.agent_docs(step) if rest else []
        )
        names = ", ".join(d.name for d in [*named, *by_server])
        if not_restored:
            also = [f"server-set fields differ: {names}"] if names else []
            return None, found.describe(not_restored) + also
        shows = "as before, but for fields the server sets"
        note = f"; server-set fields differ: {names}"
        return Restored(ReadEvidence.of(current, shows), "matches the snapshot", note), []

    async def verify(
        self,
        step: Step,
        comp: CompensationRecord,
        out: Outgoing,
        answered: str,
        *,
        status: int,
        seen_present: bool,
    ) -> Verdict:
        """Read the target back after the compensation `out` was answered `status`."""
        if comp.readback is not None:
            return await self.verify_pack(step, comp.readback, answered)
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is not None:
            current = await self.reader.read(step, snap.url, snap)
        elif out.method == "DELETE":
            current = await self.reader.read(step, out.url, None)
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
        deleted_here = out.method == "DELETE" and 200 <= status < 300
        if snap is None:
            if current.state == PRESENT:
                return Verdict(
                    "failed", f"{answered}, but it is still there ({current.why}); {RESOLVE}"
                )
            if deleted_here or seen_present or comp.located == "location":
                return compensated(
                    ReadEvidence.of(current, "gone"), f"{answered}; read back: gone ({current.why})"
                )
            return Verdict(
                "unverified",
                f"{answered} and a read answers {current.why.removeprefix('GET answered ')}: "
                "nothing shows that what the step created was ever at this URL (an undo sent "
                f"to the wrong URL undoes nothing): {RESOLVE}",
            )
        if not snap.existed and not deleted_here and seen_where_written(step, comp) is not True:
            return Verdict(
                "unverified",
                f"{answered}, and the target reads as absent as before the {step.method}; but "
                f"the {step.method} answered {step.response_status} (an update, not a "
                "creation) and was never seen at this URL, so the read does not show it "
                f"undone: {RESOLVE}",
            )
        restored, diffs = await self.restored(step, comp, snap, current, out.body)
        if restored is None:
            return Verdict(
                "failed",
                f"{answered}, but the target is not as it was before this step: {'; '.join(diffs)}",
            )
        return compensated(
            restored.evidence,
            f"{answered}; read back: {restored.shows}{restored.note}",
            etag=current.etag,
        )

    async def verify_pack(self, step: Step, spec: dict[str, Any], answered: str) -> Verdict:
        """A pack's read-back after its compensation was answered."""
        found = await self.read_back(step, spec)
        if found.state == "as_before":
            assert found.evidence is not None
            return compensated(found.evidence, f"{answered}; read back: {found.seen}")
        if found.state == "unsupported":
            return Verdict("unverified", f"{answered}, but {found.seen}: {RESOLVE}")
        if found.state == "unreadable":
            return Verdict(
                "failed",
                f"{answered}, but the target could not be read back to verify it ({found.seen}); "
                "a later rollback reads it again",
            )
        return Verdict("failed", f"{answered}, but {found.seen}")

    # --- a pack's read-back ----------------------------------------------------------------

    async def read_back(self, step: Step, spec: dict[str, Any]) -> Found:
        """A pack's read-back (compensators/readback.py): what a read of its URL shows."""
        if "targets" in spec:
            return await self.read_targets(step, spec)
        url = str(spec.get("url") or "")
        pages = await self.reader.spec(step, spec)
        current = pages.first
        if current.state == UNSUPPORTED:
            return Found("unsupported", f"the target cannot be read back ({current.why})")
        if current.state not in (PRESENT, ABSENT):
            return Found("unreadable", current.why)
        left_checks = list(spec.get("left") or [])
        if current.state == ABSENT:
            # `left_gone`: the step deleted it, so gone is as the step left it
            if spec.get("gone"):
                return Found("as_before", f"gone ({current.why})", False, _shown(current, "gone"))
            return Found(
                "differs", f"the target is gone ({current.why})", bool(spec.get("left_gone"))
            )
        if not pages.complete:
            return Found(
                "unreadable",
                f"the listing at {targets.label(url)} has more pages than undoproxy reads "
                "back, so it cannot show every item",
            )
        docs = pages.docs
        left = bool(left_checks) and not readback.differences_in_pages(left_checks, docs)
        if spec.get("gone"):
            return Found("differs", f"it is still there ({current.why})", left)
        checks = list(spec.get("expect") or [])
        diffs = readback.differences_in_pages(checks, docs)
        if diffs:
            why = f"the target is not as it was before this step: {'; '.join(diffs)}"
            return Found("differs", why, left)
        fields = sorted({".".join(str(k) for k in c.get("path") or []) for c in checks} - {"ok"})
        seen = f"as before ({', '.join(fields)})" if fields else "as before"
        return Found("as_before", seen, left, _shown(current, seen))

    async def read_targets(self, step: Step, spec: dict[str, Any]) -> Found:
        """A read-back over several targets (compensators/targets.py)."""
        diffs: list[str] = []
        first: Read | None = None
        for check in spec.get("targets") or []:
            found = await self._target(step, check)
            if isinstance(found, Found):
                return found
            read, differences = found
            first = first or read
            diffs += differences
        if diffs:  # as the step left it? (only asked when not as before)
            left = bool(spec.get("left"))
            for check in spec.get("left") or []:
                found = await self._target(step, check)
                if isinstance(found, Found) or found[1]:
                    left = False
                    break
            return Found("differs", f"not as it was before this step: {'; '.join(diffs)}", left)
        n = len(spec.get("targets") or [])
        seen = f"{n} target{'s' if n != 1 else ''} as before"
        return Found("as_before", seen, False, _shown(first, seen) if first else None)

    async def _target(self, step: Step, check: dict[str, Any]) -> tuple[Read, list[str]] | Found:
        """How one target differs from its check, or a Found when it is unreadable."""
        url = str(check.get("url") or "")
        if "propfind" in check:  # a WebDAV check (compensators/davcheck.py)
            headers, body = davcheck.propfind_request(check)
            current = await self.reader.read(
                step, url, None, method="PROPFIND", extra=headers, body=body
            )
        else:  # a GET, or an RPC read (a POST with a body: compensators/readback.py)
            current = (await self.reader.spec(step, check)).first
        name = targets.label(url)
        if current.state == UNSUPPORTED:
            return Found("unsupported", f"{name} cannot be read back ({current.why})")
        if current.state not in (PRESENT, ABSENT):
            return Found("unreadable", f"{name}: {current.why}")
        assert current.response is not None
        resp = current.response
        if "propfind" in check:
            found = davcheck.differences(check, resp.status, resp.body)
        else:
            found = targets.differences(
                check,
                resp.status,
                resp.headers,
                resp.body,
                absent=current.state == ABSENT,
                sha256=resp.sha256,
                length=resp.length,
            )
        return current, [f"{name}: {d}" for d in found]

    # --- a recreate that fell back to POST ------------------------------------------------

    async def verify_recreated(
        self,
        step: Step,
        comp: CompensationRecord,
        attempts: Attempts,
        fallback: Outgoing,
        resp: UpstreamResponse,
        first: int,
    ) -> Verdict:
        """A recreate that fell back to POST to the collection: the resource is back; at its
        own URL (read back as any restore) or under a new one (unverified)."""
        where = resp.header("Location")
        how = f"recreated with POST to the collection (PUT answered {first})"
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        url = urljoin(fallback.url, where) if where else None
        attempts.recreated_at = url or fallback.url
        if snap is not None and (url is None or target_key(url) == target_key(snap.url)):
            # No Location, or the one given is the resource's own URL: read it there.
            verdict = await self._at_own_url(step, comp, snap, fallback.body, how)
            if verdict is not None:
                verdict.compensation = attempts.into(comp.raw)
                return verdict
        if url is None:
            return Verdict(
                "unverified",
                f"{how}; no Location was given, and its own URL does not read as before, so "
                f"the new resource cannot be read back: {RESOLVE}",
                attempts.into(comp.raw),
            )
        found = ""
        if snap is not None and origin(url) == origin(step.url):
            current = await self.reader.read(step, url, snap)
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

    async def recreated_before(
        self, step: Step, comp: CompensationRecord, attempts: Attempts, earlier: str
    ) -> Verdict:
        """An earlier rollback POSTed to recreate it (never posted twice): read back where it
        went when that is the resource's own URL, else a person checks."""
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        where = attempts.recreated_at or ""
        if snap is not None and target_key(where) == target_key(snap.url):
            how = f"{earlier}: a POST recreated it"
            verdict = await self._at_own_url(step, comp, snap, None, how)
            if verdict is not None:
                return verdict
        return Verdict(
            "unverified",
            f"{earlier}: a POST to recreate it ({redact.url(where)}), under a new URL; a POST is "
            f"never sent twice: {RESOLVE}",
        )

    async def _at_own_url(
        self, step: Step, comp: CompensationRecord, snap: Snapshot, sent: bytes | None, how: str
    ) -> Verdict | None:
        """`compensated` when the resource reads as before at its own URL, else None."""
        current = await self.reader.read(step, snap.url, snap)
        if current.state != PRESENT or current.response is None:
            return None
        restored = await self.as_before(step, comp, snap, current, sent)
        if restored is None:
            return None
        return compensated(
            restored.evidence,
            f"{how}, back at its own URL; read back: {restored.shows}{restored.note}",
            etag=current.etag,
        )


def _shown(read: Read, shows: str) -> ReadEvidence | None:
    """Evidence from a read that was answered (None when it was not)."""
    if read.response is None or read.state not in (PRESENT, ABSENT):
        return None
    return ReadEvidence.of(read, shows)


def _body(comp: CompensationRecord) -> bytes | None:
    """The body the compensation record sends."""
    if comp.request is None or not comp.request.body_b64:
        return None
    try:
        return base64.b64decode(comp.request.body_b64, validate=True)
    except (binascii.Error, ValueError):
        return None
