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

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from undoproxy import redact
from undoproxy.compensators import couchdb
from undoproxy.compensators.model import parse_json
from undoproxy.compensators.record import CompensationRecord, InverseRequest
from undoproxy.credentials import CredentialBox
from undoproxy.errors import JournalError, UndoproxyError
from undoproxy.inflight import InFlight
from undoproxy.retry import RetryPolicy
from undoproxy.rollback.compare import ABSENT, PRESENT
from undoproxy.rollback.correction import Corrector
from undoproxy.rollback.judge import RESOLVE, Go, Judge, RunState, target_key
from undoproxy.rollback.locks import if_header, session_locks
from undoproxy.rollback.marking import AheadMarks
from undoproxy.rollback.outgoing import (
    NotSendable,
    Outgoing,
    compensation_request,
    resource_url,
)
from undoproxy.rollback.overlap import Lane, Turn, Undo, targets
from undoproxy.rollback.report import (
    COMPLETE,
    JOURNAL_STATUS,
    Attempts,
    Report,
    StepResult,
    Verdict,
    fully_rolled_back,
)
from undoproxy.store.base import Busy
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session, Step
from undoproxy.upstream import UpstreamClient, UpstreamError, UpstreamResponse

log = logging.getLogger(__name__)
Progress = Callable[[StepResult], Awaitable[None]]


class RollbackRefused(UndoproxyError):
    """The session cannot be rolled back now (committed, or a rollback is running)."""


class Rollback:
    """Rolls sessions back against their upstreams."""

    def __init__(
        self,
        journal: Journal,
        client: UpstreamClient,
        box: CredentialBox,
        policy: RetryPolicy | None = None,
        inflight: InFlight | None = None,
    ) -> None:
        self.journal = journal
        self.client = client
        self.box = box
        self.inflight = inflight
        self.policy = policy or RetryPolicy()
        self.judge = Judge(client, box, self.policy)
        self.corrector = Corrector(journal, client, box)
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
        session = await self.journal.find_session(session_id)
        if session is None:
            raise KeyError(session_id)
        if session.state == "committed":
            raise RollbackRefused(f"session {session_id!r} is committed; it cannot be rolled back")
        if session_id in self._running:
            raise RollbackRefused(f"a rollback of session {session_id!r} is already running")
        self._running.add(session_id)
        try:
            # On a shared journal: held across replicas, Busy when one runs elsewhere.
            async with contextlib.AsyncExitStack() as held:
                if not dry_run:
                    try:
                        await held.enter_async_context(self.journal.exclusive(session_id))
                    except Busy as exc:
                        raise RollbackRefused(str(exc)) from None
                return await self._run(session, force=force, dry_run=dry_run, progress=progress)
        finally:
            self._running.discard(session_id)

    async def _run(
        self, session: Session, *, force: bool, dry_run: bool, progress: Progress | None
    ) -> Report:
        session_id = session.id
        started = False
        run: RunState | None = None
        try:
            await self.journal.writer.flush()
            if not dry_run:
                await self.journal.set_session_state(session_id, "rolling_back")
                started = True
                if self.inflight is not None:
                    # The session takes no more mutations now; those already on their way
                    # upstream are waited for, so that each is undone, not left in place.
                    await self.inflight.drained(session_id)
                await self.journal.settled(session_id)  # and those other replicas sent
                await self.journal.writer.flush()
            steps = await self.journal.steps(session_id, mutations_only=True, exchange=False)
            run = RunState(force, dry_run, locks=session_locks(steps))
            results: list[StepResult] = []
            order = list(reversed(steps))
            lane = Lane(overlap=not dry_run)  # see overlap.py: what may overlap, and why
            marks = AheadMarks(order, lambda window: self._mark_ahead(window, run))
            try:
                for at, step in enumerate(order):
                    if not dry_run:
                        await marks.reach(at, step.id not in run.marked and _markable(step, run))
                    await lane.start(targets(run.record(step)), self._undoer(step, run))
                    for result in lane.finished():
                        results.append(result)
                        progress = await self._tell(session_id, result, run, progress)
                for result in await lane.drain():
                    results.append(result)
                    progress = await self._tell(session_id, result, run, progress)
                await marks.finish()
            finally:
                await lane.cancel()
                await marks.cancel()
            await self._durably(run)
            state = session.state
            if not dry_run:
                # As the journal now records each step: a result it could not write counts
                # as not done (the step is decided again by the next rollback).
                state = "rolled_back" if fully_rolled_back(steps) else "rollback_incomplete"
                await self.journal.set_session_state(session_id, state)
            return Report(session_id, state, results, dry_run)
        except Exception:
            for write in run.unwritten if run is not None else []:
                write.close()
            if started:  # never left `rolling_back` by an error outside the steps
                with contextlib.suppress(Exception):
                    await self.journal.set_session_state(session_id, "rollback_incomplete")
            raise

    async def _tell(
        self, session_id: str, result: StepResult, run: RunState, progress: Progress | None
    ) -> Progress | None:
        if result.status not in COMPLETE and not run.dry_run:
            log.warning(
                "rollback of %s: step %d %s %s: %s: %s",
                session_id,
                result.seq,
                result.method,
                result.url,
                result.status,
                result.detail,
            )
        return await _tell(progress, result)

    # --- one step ---------------------------------------------------------------------------

    def _undoer(self, step: Step, run: RunState) -> Undo:
        """The undo of `step`, telling its `turn` in the lane how far it got (overlap.py)."""

        async def undo(turn: Turn) -> StepResult:
            run.turns[step.id] = turn
            try:
                return await self._undo(step, run)
            finally:
                run.turns.pop(step.id, None)

        return undo

    async def _undo(self, step: Step, run: RunState) -> StepResult:
        comp = run.record(step)
        result = StepResult(step.id, step.seq, step.method, redact.url(step.url), "skipped", "")
        if comp.request is not None:
            result.compensation = {
                "method": comp.request.method,
                "url": redact.url(comp.request.url),
            }
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
        if step.id in run.marked and verdict.compensation is None:
            verdict.compensation = comp.raw  # marked ahead, never sent: as it was
        if not run.dry_run:
            write = self._result_write(step, verdict, run)
            if write is not None:
                run.unwritten.append(write)
        return result

    async def _durably(self, run: RunState, *writes: Coroutine[Any, Any, None]) -> None:
        """Commit `writes` and the results still unwritten, together: one commit, one fsync.

        A step's result is thus durable before the next compensation is sent, and all of them
        before the report is returned. A result that cannot be written is logged: its step
        stays `compensating` and a later rollback decides it by reading. A failure of
        `writes` themselves is raised (JournalError).
        """
        due, run.unwritten = run.unwritten, []
        outcomes = await asyncio.gather(*due, *writes, return_exceptions=True)
        for outcome in outcomes[: len(due)]:
            if isinstance(outcome, BaseException):
                log.warning("a rollback result could not be written to the journal: %s", outcome)
        for outcome in outcomes[len(due) :]:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _mark_ahead(self, upcoming: list[Step], run: RunState) -> None:
        """Mark the next steps whose undo a read can check `compensating`, in one commit.

        Each compensation must be durably marked before it is sent; marking a window of
        steps at once costs one commit instead of one per step. A step marked but not yet
        sent when undoproxy stops is decided by reading its target, as any `compensating`
        step is, so marking early never loses a step: only steps that a read can decide
        (idempotent, with a snapshot or a DELETE) are marked ahead; the others are marked
        just before they are sent.
        """
        marks, ids, fresh = [], [], []
        for step in upcoming:
            if step.id in run.marked or not _markable(step, run):
                continue
            comp = run.record(step)
            attempts = Attempts.of(comp.raw)
            ids.append(step.id)
            if attempts == Attempts():  # never sent: all of these get the same record
                fresh.append(step)
                continue
            attempts.sent, attempts.answer, attempts.refused = attempts.sent + 1, None, False
            # A copy: the step itself keeps its status for the decisions still to come.
            marks.append(
                self.journal.update_now(
                    replace(step), status="compensating", compensation=attempts.into(comp.raw)
                )
            )
        if fresh:  # one statement for them all
            marks.append(self.journal.mark_compensating(fresh, Attempts(sent=1).as_json()))
        try:
            await self._durably(run, *marks)
        except JournalError as exc:
            log.warning("could not mark steps compensating ahead (%s); marking one by one", exc)
            return
        run.marked.update(ids)

    def _result_write(
        self, step: Step, verdict: Verdict, run: RunState
    ) -> Coroutine[Any, Any, None] | None:
        """The journal write of a step's verdict (awaited through `_durably`), or None."""
        values: dict[str, Any] = {
            "compensation_status": verdict.status,
            "compensation_detail": verdict.detail,
        }
        if verdict.compensation is not None:
            values["compensation"] = verdict.compensation
        if verdict.status in JOURNAL_STATUS:
            values["status"] = JOURNAL_STATUS[verdict.status]
        elif step.id in run.marked:
            values["status"] = step.status  # marked ahead, nothing to undo: as it was
        elif step.compensation_status == "compensated" or step.status == "resolved":
            return None  # as it was: a person's resolution is never overwritten
        return self.journal.update_now(step, **values)

    async def _decide(self, step: Step, comp: CompensationRecord, run: RunState) -> Verdict:
        verdict = _precheck(step, comp)
        if verdict is not None and verdict.status == "irreversible" and comp.correction:
            # An email: irreversible, but the email pack's correction goes to its recipients.
            return await self.corrector.run(
                step, comp.raw, verdict, run.dry_run, lambda w: self._durably(run, w)
            )
        if verdict is not None or comp.request is None:
            return verdict or Verdict("irreversible", "no compensation was recorded")
        request = comp.request
        key = target_key(comp.snapshot_url or request.url)
        attempts = Attempts.of(comp.raw)
        if step.status in ("compensating", "unverified") or attempts.may_have_applied:
            go: Verdict | Go = await self.judge.recheck(step, comp, attempts, run)
        else:
            go = await self.judge.before(step, comp, run, key)
        if not isinstance(go, Go):
            verdict = go
        elif run.dry_run:
            verdict = Verdict("planned", f"would send {request.method} {redact.url(request.url)}")
        else:
            verdict = await self._send(step, comp, request, attempts, run, go)
        if key is not None and key not in run.targets and verdict.status != "skipped":
            run.targets[key] = (step.seq, verdict)
        return verdict

    # --- sending --------------------------------------------------------------

    async def _send(
        self,
        step: Step,
        comp: CompensationRecord,
        request: InverseRequest,
        attempts: Attempts,
        run: RunState,
        go: Go,
    ) -> Verdict:
        credentials = self.box.open(step.credentials)
        out = compensation_request(request, step.url, credentials, force=run.force)
        fitted = await self._fit(step, out, go, run, pins_rev=_pins_rev(request))
        if isinstance(fitted, Verdict):
            return fitted
        out = fitted
        attempts.sent += 1
        attempts.answer, attempts.refused = None, False
        try:  # durably before it goes out: a crash from here on is decided by a read
            if step.id not in run.marked:
                mark = self.journal.update_now(
                    step, status="compensating", compensation=attempts.into(comp.raw)
                )
                await self._durably(run, mark)
        except JournalError as exc:
            return Verdict(
                "failed",
                f"could not record the compensation before sending it ({exc}); nothing was sent",
            )
        turn = run.turns.get(step.id)
        if turn is not None:
            turn.sending()
        try:
            resp = await self._request(out, run)
            if resp.status in (404, 405) and comp.fallback is not None:
                first = resp.status
                out = compensation_request(comp.fallback, step.url, credentials, force=run.force)
                # A POST is never repeated: recorded before it goes, a later rollback that finds
                # this reports the step unverified instead of posting again.
                attempts.recreated_at = out.url
                try:
                    mark = self.journal.update_now(step, compensation=attempts.into(comp.raw))
                    await self._durably(run, mark)
                except JournalError as exc:
                    attempts.recreated_at, attempts.answer = None, first
                    return Verdict(
                        "failed",
                        f"PUT answered {first}, and the POST to recreate it could not be "
                        f"recorded before sending ({exc}); nothing was posted",
                        attempts.into(comp.raw),
                    )
                resp = await self._request(out)
                attempts.answer = resp.status
                if 200 <= resp.status < 300:
                    return await self.judge.verify_recreated(step, comp, attempts, out, resp, first)
                if not attempts.may_have_applied:
                    attempts.recreated_at = None  # refused: nothing was created
        except UpstreamError as exc:
            return Verdict(
                "failed",
                f"upstream unreachable: {str(exc).replace(out.url, redact.url(out.url))}; "
                "a later rollback reads the target to see "
                "whether it arrived, and retries",
                attempts.into(comp.raw),
            )
        attempts.answer = resp.status
        tries = f" after {resp.attempts} attempts" if resp.attempts > 1 else ""
        answered = f"{out.method} answered {resp.status}{tries}"
        excerpt = resp.body[:200].decode("utf-8", "replace").strip()
        if 200 <= resp.status < 300 and request.expect_ok and not _json_ok(resp, request):
            attempts.refused = True
            return Verdict("failed", f"{answered} but not ok: {excerpt}", attempts.into(comp.raw))
        if resp.status == 412:
            return Verdict(
                "conflict",
                "the target changed since this step (If-Match failed); nothing was overwritten",
                attempts.into(comp.raw),
            )
        gone_already = out.method == "DELETE" and resp.status in (404, 410)
        if not (200 <= resp.status < 300 or gone_already):
            return Verdict(
                "failed",
                f"{out.method} answered HTTP {resp.status}{tries}: {excerpt}",
                attempts.into(comp.raw),
            )
        if comp.then and (200 <= resp.status < 300 or gone_already):
            refused = await self._send_then(step, comp, credentials, run)
            if refused:
                return Verdict("failed", f"{answered}; then {refused}", attempts.into(comp.raw))
            answered += f", then {len(comp.then)} more like it"
        if turn is not None:  # the next step may go while this one is read back
            turn.answered()
            await turn.next_sent()  # once the next compensation is on its way
        verdict = await self.judge.verify(step, comp, out, go.note + answered)
        verdict.compensation = attempts.into(comp.raw)
        return verdict

    async def _send_then(
        self, step: Step, comp: CompensationRecord, credentials: dict[str, str], run: RunState
    ) -> str:
        """Send a pack's further requests (one per label, per user); '' when all went well."""
        for extra in comp.then:
            out = compensation_request(extra, step.url, credentials, force=run.force)
            try:
                resp = await self._request(out, run)
            except UpstreamError as exc:
                return f"{out.method} {redact.url(out.url)}: upstream unreachable ({exc})"
            excerpt = resp.body[:200].decode("utf-8", "replace").strip()
            gone = out.method == "DELETE" and resp.status in (404, 410)
            if not (200 <= resp.status < 300 or gone):
                return f"{out.method} {redact.url(out.url)} answered HTTP {resp.status}: {excerpt}"
            if extra.expect_ok and not gone and not _json_ok(resp, extra):
                return f"{out.method} {redact.url(out.url)} answered not ok: {excerpt}"
        return ""

    async def _fit(
        self, step: Step, out: Outgoing, go: Go, run: RunState, *, pins_rev: bool = False
    ) -> Outgoing | Verdict:
        """Preconditions for the write: If-Match with a known strong ETag; CouchDB's revision
        (`_rev` in a PUT body, `?rev=` of a DELETE that names one) as the target has it now."""
        body = out.json_body() if out.method == "PUT" else None
        if (isinstance(body, dict) and "_rev" in body) or pins_rev:
            # The snapshot's revision is stale once the agent wrote: the write must name the
            # revision the target has now (which the drift check just read), or none if gone.
            current = go.current
            if current is None:
                current = await self.judge.read(step, out.url, None)
            if current.state not in (PRESENT, ABSENT):
                return Verdict(
                    "failed",
                    f"could not read the revision the target has now ({current.why}); nothing "
                    "was sent, a later rollback will retry",
                )
            now = parse_json(current.response.body) if current.response is not None else None
            rev = now.get("_rev") if current.state == PRESENT and isinstance(now, dict) else None
            url = resource_url(out.url)  # the revision named now, never a stale `?rev=`
            if isinstance(body, dict):
                body = {k: v for k, v in body.items() if k != "_rev"}
                if isinstance(rev, str):
                    body["_rev"] = rev
                out = out.with_json_body(body)
            elif isinstance(rev, str):  # a DELETE: gone already, it goes without one (404)
                url += ("&" if urlsplit(url).query else "?") + urlencode({"rev": rev})
            out.url = url
        if out.method == "POST":
            return await self._fit_bulk(step, out)
        if out.method == "PUT" and not run.force and go.etag:
            out.headers["If-Match"] = go.etag
        return out

    async def _fit_bulk(self, step: Step, out: Outgoing) -> Outgoing | Verdict:
        """A CouchDB `_bulk_docs` undo: each document names the revision it has now (read in
        one `_all_docs`), as a single document's undo does; the drift check came first."""
        url = couchdb.revisions_url(out.url, out.json_body())
        if url is None:
            return out
        current = await self.judge.read(step, url, None)
        if current.state != PRESENT or current.response is None:
            return Verdict(
                "failed",
                f"could not read the revisions the documents have now ({current.why}); nothing "
                "was sent, a later rollback will retry",
            )
        return out.with_json_body(
            couchdb.with_revisions(out.json_body(), parse_json(current.response.body))
        )

    # --- I/O ------------------------------------------------------------------------------

    async def _request(self, out: Outgoing, run: RunState | None = None) -> UpstreamResponse:
        resp = await self._send_once(out)
        held = if_header(out.url, run.locks) if run is not None and resp.status == 423 else None
        if held is not None:  # locked by the session's own LOCK: send its token, as the agent did
            out.headers["If"] = held
            resp = await self._send_once(out)
        return resp

    async def _send_once(self, out: Outgoing) -> UpstreamResponse:
        if out.idempotent:
            return await self.client.send_with_retries(
                out.method, out.url, self.policy, out.headers, out.body
            )
        return await self.client.send(out.method, out.url, out.headers, out.body)


def _precheck(step: Step, comp: CompensationRecord) -> Verdict | None:
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
    if comp.noop:
        return Verdict("skipped", comp.noop)
    if comp.reason or comp.request is None:
        reason = comp.reason or (
            "the outcome is unknown and what it created cannot be identified"
            if step.status == "unknown"
            else "no compensation was recorded"
        )
        return Verdict("irreversible", f"{reason}; a person must undo this step by hand")
    return None


def _markable(step: Step, run: RunState) -> bool:
    """True when the step's undo may be marked ahead: a read can tell whether it was applied."""
    comp = run.record(step)
    request = comp.request
    if _precheck(step, comp) is not None or request is None:
        return False
    if step.status in ("compensating", "unverified") or Attempts.of(comp.raw).may_have_applied:
        return False
    if request.method not in ("PUT", "PATCH", "DELETE"):
        return False
    return bool(step.snapshot) or request.method == "DELETE"


def _pins_rev(request: InverseRequest) -> bool:
    """A DELETE that names the revision it deletes (CouchDB's `?rev=`)."""
    query = urlsplit(request.url).query
    return request.method == "DELETE" and any(k == "rev" for k, _ in parse_qsl(query))


def _json_ok(resp: UpstreamResponse, request: InverseRequest) -> bool:
    """For APIs that report errors inside a 2xx answer (Slack): `"ok": true`, or an error
    that says the undo already holds (`message_not_found` for chat.delete)."""
    body = parse_json(resp.body)
    if not isinstance(body, dict):
        return False
    return body.get("ok") is True or (body.get("error") in request.ok_errors)


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
