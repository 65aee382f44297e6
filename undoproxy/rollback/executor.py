"""The LIFO executor: undo a session's mutations newest first, and prove each undo by reading.

For each step (see `report.py` for the statuses):
1. decisions that need no network (never forwarded, irreversible, already compensated, ...);
2. a step an earlier rollback already sent a compensation for (`compensating` after a crash,
   `unverified`, or failed after its answer) is decided by reading the target: already as
   before -> compensated; as the step left it -> sent again; otherwise failed. Never re-sent
   blind;
3. otherwise the drift check: the target is read and compared with what the agent's write
   produced (conflict when someone changed it since). A resource written by several steps of
   the session is compared once, against the newest of them: the older steps follow the
   newer one's verified restore. An unreadable target is `failed`, never "gone";
4. `compensating` is written durably, then the compensation is sent;
5. a 2xx answer is verified: the target is read again and compared with the snapshot (body
   and representation headers), or checked to be gone. Only then is the step `compensated`.
Any error inside one step makes that step `failed` with its reason; the others go on.
The dry run goes through 1-3 (reads only) and stops where the real run would send.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from undoproxy import redact
from undoproxy.compensators.model import Snapshot, origin, parse_json
from undoproxy.credentials import CredentialBox
from undoproxy.errors import JournalError, UndoproxyError
from undoproxy.retry import RetryPolicy
from undoproxy.rollback import compare
from undoproxy.rollback.compare import ABSENT, PRESENT, UNSUPPORTED, Read
from undoproxy.rollback.outgoing import (
    NotSendable,
    Outgoing,
    compensation_request,
    read_request,
    resource_url,
)
from undoproxy.rollback.report import (
    COMPLETE,
    JOURNAL_STATUS,
    Attempts,
    Report,
    StepResult,
    Verdict,
)
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamClient, UpstreamError, UpstreamResponse

log = logging.getLogger(__name__)
Progress = Callable[[StepResult], Awaitable[None]]
RESOLVE = "check by hand, then `undoproxy resolve STEP`"


class RollbackRefused(UndoproxyError):
    """The session cannot be rolled back now (committed, or a rollback is running)."""


@dataclass
class _Go:
    """Send the compensation; `current` is the target as last read (for If-Match, `_rev`)."""

    current: Read | None = None
    etag: str | None = None  # a strong ETag the target is known to have right now
    note: str = ""  # why it is sent (again), put before what came of it


@dataclass
class _Run:
    force: bool
    dry_run: bool
    # resource -> (seq, verdict) of the newest step of this run that wrote it
    targets: dict[str, tuple[int, Verdict]] = field(default_factory=dict)


def _key(url: str | None) -> str | None:
    if not url:
        return None
    p = urlsplit(resource_url(url))
    return urlunsplit((p.scheme, p.netloc.lower(), p.path.rstrip("/") or "/", p.query, ""))


class Rollback:
    """Rolls sessions back against their upstreams."""

    def __init__(
        self,
        journal: Journal,
        client: UpstreamClient,
        box: CredentialBox,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.journal = journal
        self.client = client
        self.box = box
        self.policy = policy or RetryPolicy()
        self._running: set[str] = set()

    async def run(
        self,
        session_id: str,
        *,
        force: bool = False,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> Report:
        """Compensate the session's mutations in LIFO order; raises RollbackRefused."""
        session = self.journal.sessions.get(session_id)
        if session is None:
            raise KeyError(session_id)
        if session.state == "committed":
            raise RollbackRefused(f"session {session_id!r} is committed; it cannot be rolled back")
        if session_id in self._running:
            raise RollbackRefused(f"a rollback of session {session_id!r} is already running")
        self._running.add(session_id)
        started = False
        try:
            await self.journal.writer.flush()
            if not dry_run:
                await self.journal.set_session_state(session_id, "rolling_back")
                started = True
            steps = await self.journal.steps(session_id, mutations_only=True)
            run = _Run(force, dry_run)
            results = []
            for step in reversed(steps):
                result = await self._undo(step, run)
                results.append(result)
                if result.status not in COMPLETE and not dry_run:
                    log.warning(
                        "rollback of %s: step %d %s %s: %s: %s",
                        session_id,
                        step.seq,
                        step.method,
                        result.url,
                        result.status,
                        result.detail,
                    )
                progress = await _tell(progress, result)
            complete = all(r.status in COMPLETE for r in results)
            state = session.state
            if not dry_run:
                state = "rolled_back" if complete else "rollback_incomplete"
                await self.journal.set_session_state(session_id, state)
            return Report(session_id, state, results, dry_run)
        except Exception:
            if started:  # never left `rolling_back` by an error outside the steps
                with contextlib.suppress(Exception):
                    await self.journal.set_session_state(session_id, "rollback_incomplete")
            raise
        finally:
            self._running.discard(session_id)

    # --- one step ---------------------------------------------------------------------------

    async def _undo(self, step: Step, run: _Run) -> StepResult:
        comp = step.compensation or {}
        result = StepResult(step.id, step.seq, step.method, redact.url(step.url), "skipped", "")
        if comp.get("ready") and comp.get("method"):
            result.compensation = {"method": comp["method"], "url": redact.url(comp["url"])}
        try:
            verdict = await self._decide(step, comp, run)
        except NotSendable as exc:
            verdict = Verdict("failed", f"the compensation cannot be sent: {exc}; {RESOLVE}")
        except Exception as exc:  # one broken step must never stop the others
            log.exception("rollback of step %s failed inside undoproxy", step.id)
            verdict = Verdict(
                "failed",
                f"undoproxy could not undo this step ({type(exc).__name__}: "
                f"{redact.url(str(exc))[:200]}); the other steps went on",
            )
        result.status, result.detail = verdict.status, verdict.detail
        if not run.dry_run:
            result.detail += await self._record(step, verdict)
        return result

    async def _record(self, step: Step, verdict: Verdict) -> str:
        """Write the verdict (awaited: a later rollback decides by it); '' or why it failed."""
        values: dict[str, Any] = {
            "compensation_status": verdict.status,
            "compensation_detail": verdict.detail,
        }
        if verdict.compensation is not None:
            values["compensation"] = verdict.compensation
        if verdict.status in JOURNAL_STATUS:
            values["status"] = JOURNAL_STATUS[verdict.status]
        elif step.compensation_status == "compensated":
            return ""
        try:
            await self.journal.update_now(step, **values)
        except JournalError as exc:
            return f" (this result could not be written to the journal: {exc})"
        return ""

    async def _decide(self, step: Step, comp: dict[str, Any], run: _Run) -> Verdict:
        verdict = _precheck(step, comp)
        if verdict is not None:
            return verdict
        key = _key(comp.get("snapshot_url") or comp.get("url"))
        attempts = Attempts.of(comp)
        if step.status in ("compensating", "unverified") or attempts.may_have_applied:
            go: Verdict | _Go = await self._recheck(step, comp, attempts, run)
        else:
            go = await self._before(step, comp, run, key)
        if isinstance(go, _Go):
            if run.dry_run:
                go_verdict = Verdict(
                    "planned", f"would send {comp['method']} {redact.url(comp['url'])}"
                )
            else:
                go_verdict = await self._send(step, comp, attempts, run, go)
            verdict = go_verdict
        else:
            verdict = go
        if key is not None and key not in run.targets and verdict.status != "skipped":
            run.targets[key] = (step.seq, verdict)
        return verdict

    # --- before sending ---------------------------------------------------------------------

    async def _before(
        self, step: Step, comp: dict[str, Any], run: _Run, key: str | None
    ) -> Verdict | _Go:
        """The first attempt: unknown outcomes, the chain of steps on one target, drift."""
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if step.status == "unknown":
            if snap is None:
                return _Go()
            current = await self._read(step, snap.url, snap)
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
            return _Go(current)  # it did take effect: undo it (no baseline to check drift)
        newer = run.targets.get(key) if key else None
        if newer is not None:
            seq, verdict = newer
            if verdict.status in ("compensated", "planned"):
                # Compared once, against the newest step: this one follows its restore.
                return _Go(etag=verdict.etag)
            if verdict.status in ("conflict", "failed"):
                return Verdict(
                    verdict.status,
                    f"not attempted: the newer step #{seq} on the same target ended "
                    f"{verdict.status}; undo that one first",
                )
        if comp.get("kind") == "delete-created" and comp.get("inferred"):
            return await self._confirm_created(step, comp)
        if run.force or snap is None or not (comp.get("after") or comp.get("check_absent")):
            return _Go()
        current = await self._read(step, snap.url, snap)
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
        if comp.get("check_absent"):
            if current.state == PRESENT:
                return Verdict(
                    "conflict",
                    "the deleted resource exists again; nothing was overwritten (use --force "
                    "to recreate it anyway)",
                )
            return _Go(current)
        changed = compare.changed_since(current.response, comp["after"])
        if changed:
            return Verdict(
                "conflict",
                f"the target changed since this step ({changed}); nothing was overwritten "
                "(use --force to restore anyway)",
            )
        return _Go(current, compare.strong_etag(current.etag))

    async def _confirm_created(self, step: Step, comp: dict[str, Any]) -> Verdict | _Go:
        """An inferred delete-created: is there anything at the URL undoproxy guessed?"""
        current = await self._read(step, comp["url"], None)
        if current.state == ABSENT:
            return Verdict(
                "irreversible",
                f"cannot confirm what the {step.method} created: undoproxy inferred "
                f"{redact.url(comp['url'])} from the response and it answers "
                f"{current.why.removeprefix('GET answered ')}; {RESOLVE}",
            )
        if current.state != PRESENT:
            return Verdict(
                "failed",
                f"could not read {redact.url(comp['url'])} to confirm what the "
                f"{step.method} created ({current.why}); nothing was sent, a later rollback "
                "will retry",
            )
        return _Go(current)

    async def _recheck(
        self, step: Step, comp: dict[str, Any], attempts: Attempts, run: _Run
    ) -> Verdict | _Go:
        """A compensation went out before: decide by reading the target, never blind."""
        earlier = (
            "a compensation was being sent when undoproxy stopped"
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
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is not None:
            current = await self._read(step, snap.url, snap)
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
            as_left = _as_left(current.response, comp)
            if as_left or (run.force and comp["method"] in ("PUT", "DELETE", "PATCH")):
                why = "the target is as the step left it" if as_left else "--force"
                note = f"{earlier} and it did not take effect ({why}): sent again; "
                return _Go(current, compare.strong_etag(current.etag), note)
            return Verdict(
                "failed",
                f"{earlier}; the target is neither as before this step nor as the step left "
                f"it ({'; '.join(diffs)}); it was not sent again: check by hand (--force "
                "sends it again)",
            )
        if comp.get("method") == "DELETE":
            current = await self._read(step, comp["url"], None)
            if current.state == ABSENT:
                return Verdict(
                    "compensated",
                    f"{earlier}; read back, it is gone ({current.why}): nothing was sent again",
                )
            if current.state == PRESENT:  # still there: the earlier DELETE did not apply
                return _Go(current, note=f"{earlier} and it is still there: sent again; ")
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

    # --- sending and verifying --------------------------------------------------------------

    async def _send(
        self, step: Step, comp: dict[str, Any], attempts: Attempts, run: _Run, go: _Go
    ) -> Verdict:
        credentials = self.box.open(step.credentials)
        out = compensation_request(comp, step.url, credentials, force=run.force)
        out = await self._fit(step, out, go, run)
        attempts.sent += 1
        attempts.answer, attempts.refused = None, False
        try:  # durably before it goes out: a crash from here on is decided by a read
            await self.journal.update_now(
                step, status="compensating", compensation=attempts.into(comp)
            )
        except JournalError as exc:
            return Verdict(
                "failed",
                f"could not record the compensation before sending it ({exc}); nothing was sent",
            )
        try:
            resp = await self._request(out)
            if resp.status in (404, 405) and comp.get("fallback"):
                first = resp.status
                out = compensation_request(comp["fallback"], step.url, credentials, force=run.force)
                # A POST is never repeated: recorded before it goes, a later rollback that finds
                # this reports the step unverified instead of posting again.
                attempts.recreated_at = out.url
                try:
                    await self.journal.update_now(step, compensation=attempts.into(comp))
                except JournalError as exc:
                    attempts.recreated_at = None
                    return Verdict(
                        "failed",
                        f"PUT answered {first}, and the POST to recreate it could not be "
                        f"recorded before sending ({exc}); nothing was posted",
                        attempts.into(comp),
                    )
                resp = await self._request(out)
                attempts.answer = resp.status
                if 200 <= resp.status < 300:
                    return await self._verify_recreated(step, comp, attempts, out, resp, first)
                if not attempts.may_have_applied:
                    attempts.recreated_at = None  # refused: nothing was created
        except UpstreamError as exc:
            return Verdict(
                "failed",
                f"upstream unreachable: {exc}; a later rollback reads the target to see "
                "whether it arrived, and retries",
                attempts.into(comp),
            )
        attempts.answer = resp.status
        tries = f" after {resp.attempts} attempts" if resp.attempts > 1 else ""
        answered = f"{out.method} answered {resp.status}{tries}"
        excerpt = resp.body[:200].decode("utf-8", "replace").strip()
        if 200 <= resp.status < 300 and comp.get("expect_ok") and not _json_ok(resp):
            attempts.refused = True
            return Verdict("failed", f"{answered} but not ok: {excerpt}", attempts.into(comp))
        if resp.status == 412:
            return Verdict(
                "conflict",
                "the target changed since this step (If-Match failed); nothing was overwritten",
                attempts.into(comp),
            )
        gone_already = out.method == "DELETE" and resp.status in (404, 410)
        if not (200 <= resp.status < 300 or gone_already):
            return Verdict(
                "failed",
                f"{out.method} answered HTTP {resp.status}{tries}: {excerpt}",
                attempts.into(comp),
            )
        verdict = await self._verify(step, comp, out, go.note + answered)
        verdict.compensation = attempts.into(comp)
        return verdict

    async def _fit(self, step: Step, out: Outgoing, go: _Go, run: _Run) -> Outgoing:
        """Preconditions for the write: If-Match with a known strong ETag; CouchDB's `_rev`."""
        body = out.json_body() if out.method == "PUT" else None
        if isinstance(body, dict) and "_rev" in body:
            # The snapshot's revision is stale once the agent wrote: the write must name the
            # revision the target has now (which the drift check just read), or none if gone.
            current = go.current
            if current is None:
                current = await self._read(step, out.url, None)
            if current.state not in (PRESENT, ABSENT):
                raise NotSendable(f"the target's revision could not be read ({current.why})")
            now = parse_json(current.response.body) if current.response is not None else None
            body = {k: v for k, v in body.items() if k != "_rev"}
            if current.state == PRESENT and isinstance(now, dict) and "_rev" in now:
                body["_rev"] = now["_rev"]
            out = out.with_json_body(body)
            out.url = resource_url(out.url)  # the body names the revision, not a stale `?rev=`
        if out.method == "PUT" and not run.force and go.etag:
            out.headers["If-Match"] = go.etag
        return out

    async def _verify(
        self, step: Step, comp: dict[str, Any], out: Outgoing, answered: str
    ) -> Verdict:
        """Read the target back: only a read that shows the prior state makes it compensated."""
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        if snap is not None:
            current = await self._read(step, snap.url, snap)
        elif out.method == "DELETE":
            current = await self._read(step, out.url, None)
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

    async def _verify_recreated(
        self,
        step: Step,
        comp: dict[str, Any],
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
                attempts.into(comp),
            )
        url = urljoin(fallback.url, where)
        attempts.recreated_at = url
        snap = Snapshot.from_json(step.snapshot) if step.snapshot else None
        found = ""
        if snap is not None and origin(url) == origin(step.url):
            current = await self._read(step, url, snap)
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
            attempts.into(comp),
        )

    # --- I/O ------------------------------------------------------------------------------

    async def _read(self, step: Step, url: str, snap: Snapshot | None) -> Read:
        """GET the resource (never a pinned version of it) with the agent's credentials."""
        target = resource_url(url)
        accept = snap.content_type if snap is not None else None
        request = read_request(target, step.url, self.box.open(step.credentials), accept)
        try:
            resp = await self.client.send_with_retries(
                "GET", request.url, self.policy, request.headers
            )
        except UpstreamError as exc:
            return Read(target, None, str(exc))
        return Read(target, resp)

    async def _request(self, out: Outgoing) -> UpstreamResponse:
        if out.idempotent:
            return await self.client.send_with_retries(
                out.method, out.url, self.policy, out.headers, out.body
            )
        return await self.client.send(out.method, out.url, out.headers, out.body)


def _precheck(step: Step, comp: dict[str, Any]) -> Verdict | None:
    """A verdict that needs no network, or None."""
    if step.compensation_status == "compensated" or step.status == "compensated":
        return Verdict("skipped", "already compensated by an earlier rollback")
    if step.status == "resolved":
        return Verdict("skipped", "resolved by a person")
    if step.status in ("held", "denied"):
        return Verdict("skipped", "never forwarded")
    if step.status == "pending":
        return Verdict(
            "failed", "the request is still in flight; roll back again once it has completed"
        )
    if step.status == "failed":
        why = f"HTTP {step.response_status}" if step.response_status else step.error
        return Verdict("skipped", f"the request failed upstream ({why}); nothing to undo")
    if comp.get("noop"):
        return Verdict("skipped", str(comp["noop"]))
    if comp.get("reason") or not comp.get("ready"):
        reason = comp.get("reason") or (
            "the outcome is unknown and what it created cannot be identified"
            if step.status == "unknown"
            else "no compensation was recorded"
        )
        return Verdict("irreversible", f"{reason}; a person must undo this step by hand")
    return None


def _as_left(current: UpstreamResponse, comp: dict[str, Any]) -> bool | None:
    """Is the target as the agent's step left it? None when nothing says what that was."""
    if comp.get("check_absent"):
        return current.status in (404, 410)
    after = comp.get("after")
    if not after:
        return None
    return compare.changed_since(current, after) == ""


def _json_ok(resp: UpstreamResponse) -> bool:
    """For APIs that report errors inside a 2xx answer (Slack): `"ok": true`."""
    body = parse_json(resp.body)
    return isinstance(body, dict) and body.get("ok") is True


async def _tell(progress: Progress | None, result: StepResult) -> Progress | None:
    """Report progress; a listener that fails (a client gone) is dropped, the rollback goes on."""
    if progress is None:
        return None
    try:
        await progress(result)
    except Exception as exc:
        log.info("rollback progress listener dropped: %s", exc)
        return None
    return progress
