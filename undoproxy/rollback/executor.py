"""The LIFO executor: undo a session's mutations newest first, and prove each undo by reading.

Each step goes through four phases, one module each:
1. plan (`decide.py`, `recheck.py`): what needs no network (never forwarded, irreversible,
   nothing to undo with its evidence); a step whose request did not succeed, or whose
   compensation went out before, is decided by reading its target; otherwise the drift
   check. It answers a Verdict (nothing to send) or a Go;
2. mark (here and `marking.py`): `compensating` is written durably before anything is sent,
   a window of steps at a time where a read can decide a step marked but never sent;
3. send (`send.py`): the compensation goes out, fenced by the rollback's lease;
4. verify (`verify.py`): the target is read back; only that read makes a step `compensated`.
Any error inside one step makes that step `failed` with its reason; the others go on. Each
verdict is recorded through `Journal.settle`, which takes nothing but a verdict with its
evidence. The dry run plans (reads only) and stops where the real run would send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

from undoproxy import redact
from undoproxy.compensators.model import parse_form, parse_json
from undoproxy.compensators.record import CompensationRecord
from undoproxy.credentials import CredentialBox
from undoproxy.errors import JournalError, UndoproxyError
from undoproxy.inflight import InFlight
from undoproxy.lifecycle import StepStatus
from undoproxy.retry import RetryPolicy
from undoproxy.rollback.compare import after_body
from undoproxy.rollback.correction import Corrector
from undoproxy.rollback.decide import Decider, precheck
from undoproxy.rollback.locks import session_locks
from undoproxy.rollback.marking import AheadMarks
from undoproxy.rollback.outgoing import NotSendable
from undoproxy.rollback.overlap import Lane, Turn, Undo, targets
from undoproxy.rollback.reader import Reader
from undoproxy.rollback.recheck import Recheck
from undoproxy.rollback.report import Attempts, Report, StepResult, fully_rolled_back
from undoproxy.rollback.send import Sender
from undoproxy.rollback.state import RESOLVE, Go, RunState, agent_outcome, target_key
from undoproxy.rollback.verdict import COMPLETE, Verdict
from undoproxy.rollback.verify import Verifier
from undoproxy.store.base import Busy, Lease
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session, Step
from undoproxy.upstream import UpstreamClient

log = logging.getLogger(__name__)
Progress = Callable[[StepResult], Awaitable[None]]
AFTER_READS = 10.0  # how long a rollback waits for reads right after its steps' writes


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
        after_reads: InFlight | None = None,
    ) -> None:
        self.journal = journal
        self.client = client
        self.box = box
        self.inflight = inflight
        self.after_reads = after_reads
        self.policy = policy or RetryPolicy()
        self.reader = Reader(client, box, self.policy)
        self.verifier = Verifier(self.reader, self._agent_docs)
        self.decider = Decider(self.reader, self.verifier)
        self.recheck = Recheck(self.reader, self.verifier)
        self.sender = Sender(journal, client, box, self.policy, self.reader, self.verifier)
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
            if dry_run:
                return await self._run(
                    session, Lease(), force=force, dry_run=True, progress=progress
                )
            # On a shared journal: held across replicas, Busy when one runs elsewhere.
            try:
                async with self.journal.exclusive(session_id) as lease:
                    return await self._run(
                        session, lease, force=force, dry_run=False, progress=progress
                    )
            except Busy as exc:
                raise RollbackRefused(str(exc)) from None
        finally:
            self._running.discard(session_id)

    async def _run(
        self,
        session: Session,
        lease: Lease,
        *,
        force: bool,
        dry_run: bool,
        progress: Progress | None,
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
                if self.after_reads is not None:  # their after-images are what drift needs
                    await self.after_reads.drained(session_id, timeout=AFTER_READS)
                await self.journal.settled(session_id)  # and those other replicas sent
                await self.journal.writer.flush()
            steps = await self.journal.steps(session_id, mutations_only=True, exchange=False)
            run = RunState(force, dry_run, locks=session_locks(steps))
            results: list[StepResult] = []
            order = list(reversed(steps))
            lane = Lane(overlap=not dry_run)  # see overlap.py: what may overlap, and why
            marks = AheadMarks(order, lambda window: self._mark_ahead(window, run, lease))
            try:
                for at, step in enumerate(order):
                    if not dry_run:
                        await marks.reach(at, step.id not in run.marked and _markable(step, run))
                    await lane.start(targets(run.record(step)), self._undoer(step, run, lease))
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

    async def _agent_docs(self, step: Step) -> list[Any] | None:
        """What the agent's step wrote and was answered, as JSON (for `compare.server_set`);
        None when it wrote something that cannot be read field by field."""
        if step.method == "DELETE":
            return []  # it wrote no field: any field a restore could not set, the server set
        full = await self.journal.step(step.id)
        if full is None:
            return None
        sent: Any = parse_json(full.request_body) if full.request_body else {}
        if sent is None:
            sent = parse_form(full.request_body)
        if sent is None or full.request_body_len > len(full.request_body or b""):
            return None  # not JSON, or only its first bytes were kept
        docs = [sent]
        answer = parse_json(full.response_body) if full.response_body else None
        if answer is not None:
            docs.append(answer)
        comp = CompensationRecord.of(step.compensation)
        if comp.after is not None and (kept := after_body(comp.after)) is not None:
            docs.append(kept)
        return docs

    # --- one step ---------------------------------------------------------------------------

    def _undoer(self, step: Step, run: RunState, lease: Lease) -> Undo:
        """The undo of `step`, telling its `turn` in the lane how far it got (overlap.py)."""

        async def undo(turn: Turn) -> StepResult:
            run.turns[step.id] = turn
            try:
                return await self._undo(step, run, lease)
            finally:
                run.turns.pop(step.id, None)

        return undo

    async def _undo(self, step: Step, run: RunState, lease: Lease) -> StepResult:
        comp = run.record(step)
        result = StepResult(
            step.id, step.seq, step.method, redact.url(step.url), "irreversible", ""
        )
        if comp.request is not None:
            result.compensation = {
                "method": comp.request.method,
                "url": redact.url(comp.request.url),
            }
        try:
            verdict = await self._decide(step, comp, run, lease)
        except NotSendable as exc:
            verdict = Verdict("failed", f"the compensation cannot be sent: {exc}; {RESOLVE}")
        except Exception as exc:  # one broken step must never stop the others
            log.exception("rollback of step %s failed inside undoproxy", step.id)
            verdict = Verdict(
                "failed",
                f"undoproxy could not undo this step ({type(exc).__name__}: "
                f"{redact.url(str(exc))[:200]}); the other steps went on",
            )
        result.status, result.detail, result.evidence = (
            verdict.status,
            verdict.detail,
            verdict.evidence,
        )
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

    async def _mark_ahead(self, upcoming: list[Step], run: RunState, lease: Lease) -> None:
        """Mark the next steps whose undo a read can check `compensating`, in one commit.

        Each compensation must be durably marked before it is sent; marking a window of
        steps at once costs one commit instead of one per step. A step marked but not yet
        sent when undoproxy stops is decided by reading its target, as any `compensating`
        step is, so marking early never loses a step: only steps that a read can decide
        (idempotent, with a snapshot or a DELETE of a known resource) are marked ahead; the
        others are marked just before they are sent.
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
            marks.append(self.journal.mark(replace(step), attempts.into(comp.raw), lease=lease))
        if fresh:  # one statement for them all
            marks.append(
                self.journal.mark_compensating(fresh, Attempts(sent=1).as_json(), lease=lease)
            )
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
        back = None
        if verdict.journal_status is None:
            if step.id in run.marked:
                back = StepStatus(step.status)  # marked ahead, nothing to undo: as it was
            elif step.compensation_status == "compensated" or step.status == "resolved":
                return None  # as it was: a person's resolution is never overwritten
        return self.journal.settle(step, verdict.settlement(back))

    async def _decide(
        self, step: Step, comp: CompensationRecord, run: RunState, lease: Lease
    ) -> Verdict:
        verdict = precheck(step, comp)
        if verdict is not None and verdict.status == "irreversible" and comp.correction:
            # An email: irreversible, but the email pack's correction goes to its recipients.
            return await self.corrector.run(
                step, comp.raw, verdict, run.dry_run, lambda w: self._durably(run, w)
            )
        if verdict is not None:
            return verdict
        # An RPC API undoes every resource through the same URL: its pack names the target.
        key = comp.raw.get("target") or target_key(
            comp.snapshot_url or (comp.request.url if comp.request else None)
        )
        attempts = Attempts.of(comp.raw)
        go: Verdict | Go
        if step.status in ("compensating", "unverified") or attempts.may_have_applied:
            go = await self.recheck.recheck(step, comp, attempts, run)
        elif agent_outcome(step) != "succeeded":
            go = await self.decider.undecided(step, comp)
        else:
            go = await self.decider.before(step, comp, run, key)
        if not isinstance(go, Go):
            verdict = go
        elif comp.request is None:  # a read showed it changed, and nothing can undo it
            verdict = Verdict("unverified", f"{go.note}undoproxy has no inverse for it: {RESOLVE}")
        elif run.dry_run:
            verdict = Verdict(
                "planned", f"would send {comp.request.method} {redact.url(comp.request.url)}"
            )
        else:
            verdict = await self.sender.send(
                step, comp, comp.request, attempts, run, go, lease=lease, durably=self._durably
            )
        if key is not None and key not in run.targets and verdict.status != "skipped":
            run.targets[key] = (step.seq, verdict)
        return verdict


def _markable(step: Step, run: RunState) -> bool:
    """True when the step's undo may be marked ahead: a read can tell whether it was applied,
    and no read is needed before it to decide whether it goes at all."""
    comp = run.record(step)
    request = comp.request
    if precheck(step, comp) is not None or request is None:
        return False
    if step.status in ("compensating", "unverified") or Attempts.of(comp.raw).may_have_applied:
        return False
    if agent_outcome(step) != "succeeded" or request.method not in ("PUT", "PATCH", "DELETE"):
        return False
    if comp.kind == "delete-created" and (comp.inferred or comp.located != "location"):
        return False  # confirmed by a read first, and marked with what that read saw
    return bool(step.snapshot) or request.method == "DELETE"


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
