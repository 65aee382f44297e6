"""Mark and send: a step's compensation goes out once it is durably `compensating`, at most
once per decision, and only while this rollback still holds the session's lease.

Preconditions are fitted first (If-Match with a strong ETag the target has now; CouchDB's
revision). The mark is committed before the request leaves (unless the step was marked ahead,
`marking.py`), fenced by the rollback's lease on a shared journal (`store.base.Lease`): a
rollback that lost its lease sends nothing more. A request that is not idempotent (POST, PATCH)
is never retried after an error or a lost answer; a later rollback decides it by reading.
The answer is then handed to `verify.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from undoproxy import redact
from undoproxy.compensators import couchdb
from undoproxy.compensators.model import parse_json
from undoproxy.compensators.record import CompensationRecord, InverseRequest
from undoproxy.credentials import CredentialBox
from undoproxy.errors import JournalError
from undoproxy.retry import RetryPolicy
from undoproxy.rollback.compare import PRESENT, Read, absent
from undoproxy.rollback.locks import if_header
from undoproxy.rollback.outgoing import Outgoing, compensation_request, resource_url
from undoproxy.rollback.reader import Reader
from undoproxy.rollback.report import Attempts
from undoproxy.rollback.state import RESOLVE, Go, RunState
from undoproxy.rollback.verdict import Verdict
from undoproxy.rollback.verify import Verifier
from undoproxy.store.base import Lease
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamClient, UpstreamError, UpstreamResponse

log = logging.getLogger(__name__)
Durably = Callable[..., Awaitable[None]]


class Sender:
    """Sends compensations and hands their answers to the verifier."""

    def __init__(
        self,
        journal: Journal,
        client: UpstreamClient,
        box: CredentialBox,
        policy: RetryPolicy,
        reader: Reader,
        verifier: Verifier,
    ) -> None:
        self.journal = journal
        self.client = client
        self.box = box
        self.policy = policy
        self.reader = reader
        self.verifier = verifier

    async def send(
        self,
        step: Step,
        comp: CompensationRecord,
        request: InverseRequest,
        attempts: Attempts,
        run: RunState,
        go: Go,
        *,
        lease: Lease,
        durably: Callable[[RunState, Coroutine[Any, Any, None]], Awaitable[None]],
    ) -> Verdict:
        """Mark, send and verify one compensation."""
        credentials = self.box.open(step.credentials)
        out = compensation_request(
            request, step.url, credentials, force=run.force, session=step.session_id
        )
        fitted = await self._fit(step, out, go, run, pins_rev=_pins_rev(request))
        if isinstance(fitted, Verdict):
            return fitted
        out = fitted
        attempts.sent += 1
        attempts.answer, attempts.refused = None, False
        attempts.seen = attempts.seen or go.seen_present
        try:  # durably before it goes out: a crash from here on is decided by a read
            if step.id not in run.marked:
                await durably(run, self.journal.mark(step, attempts.into(comp.raw), lease=lease))
            lease.check()
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
                return await self._recreate(step, comp, attempts, resp.status, lease, durably, run)
        except UpstreamError as exc:
            return Verdict(
                "failed",
                f"upstream unreachable: {str(exc).replace(out.url, redact.url(out.url))}; "
                "a later rollback reads the target to see whether it arrived, and retries",
                attempts.into(comp.raw),
            )
        attempts.answer = resp.status
        tries = f" after {resp.attempts} attempts" if resp.attempts > 1 else ""
        answered = f"{go.note}{out.method} answered {resp.status}{tries}"
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
        gone_already = out.method == "DELETE" and absent(resp)
        if not (200 <= resp.status < 300 or gone_already):
            return Verdict(
                "failed",
                f"{out.method} answered HTTP {resp.status}{tries}: {excerpt}",
                attempts.into(comp.raw),
            )
        if comp.then:
            refused = await self._send_then(step, comp, credentials, run, lease)
            if refused:
                return Verdict("failed", f"{answered}; then {refused}", attempts.into(comp.raw))
            answered += f", then {len(comp.then)} more like it"
        if turn is not None:  # the next step may go while this one is read back
            turn.answered()
            await turn.next_sent()  # once the next compensation is on its way
        verdict = await self.verifier.verify(
            step, comp, out, answered, status=resp.status, seen_present=attempts.seen
        )
        verdict.compensation = attempts.into(comp.raw)
        return verdict

    async def _recreate(
        self,
        step: Step,
        comp: CompensationRecord,
        attempts: Attempts,
        first: int,
        lease: Lease,
        durably: Callable[[RunState, Coroutine[Any, Any, None]], Awaitable[None]],
        run: RunState,
    ) -> Verdict:
        """PUT answered 404/405: POST the snapshot to the collection, once ever."""
        assert comp.fallback is not None
        credentials = self.box.open(step.credentials)
        out = compensation_request(
            comp.fallback, step.url, credentials, force=run.force, session=step.session_id
        )
        # A POST is never repeated: recorded before it goes, a later rollback that finds this
        # decides the step by reading, instead of posting again.
        attempts.recreated_at = out.url
        try:
            await durably(run, self.journal.mark(step, attempts.into(comp.raw), lease=lease))
            lease.check()
        except JournalError as exc:
            attempts.recreated_at, attempts.answer = None, first
            return Verdict(
                "failed",
                f"PUT answered {first}, and the POST to recreate it could not be recorded "
                f"before sending ({exc}); nothing was posted",
                attempts.into(comp.raw),
            )
        try:
            resp = await self._request(out)
        except UpstreamError as exc:
            return Verdict(
                "unverified",
                f"PUT answered {first}; the POST to recreate it got no answer ({exc}); a POST is "
                f"never sent twice: {RESOLVE}",
                attempts.into(comp.raw),
            )
        attempts.answer = resp.status
        if 200 <= resp.status < 300:
            return await self.verifier.verify_recreated(step, comp, attempts, out, resp, first)
        excerpt = resp.body[:200].decode("utf-8", "replace").strip()
        if 400 <= resp.status < 500 and resp.status not in (408, 429):
            attempts.recreated_at = None  # refused: nothing was created
        return Verdict(
            "failed",
            f"PUT answered {first}, then POST answered HTTP {resp.status}: {excerpt}",
            attempts.into(comp.raw),
        )

    async def _send_then(
        self,
        step: Step,
        comp: CompensationRecord,
        credentials: dict[str, str],
        run: RunState,
        lease: Lease,
    ) -> str:
        """Send a pack's further requests (one per label, per user); '' when all went well."""
        for extra in comp.then:
            out = compensation_request(
                extra, step.url, credentials, force=run.force, session=step.session_id
            )
            try:
                lease.check()
            except JournalError as exc:
                return f"{out.method} {redact.url(out.url)} was not sent: {exc}"
            try:
                resp = await self._request(out, run)
            except UpstreamError as exc:
                return f"{out.method} {redact.url(out.url)}: upstream unreachable ({exc})"
            excerpt = resp.body[:200].decode("utf-8", "replace").strip()
            gone = out.method == "DELETE" and absent(resp)
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
            current: Read | None = go.current
            if current is None:
                current = await self.reader.read(step, out.url, None)
            if current.state not in (PRESENT, "absent"):
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
        current = await self.reader.read(step, url, None)
        if current.state != PRESENT or current.response is None:
            return Verdict(
                "failed",
                f"could not read the revisions the documents have now ({current.why}); nothing "
                "was sent, a later rollback will retry",
            )
        return out.with_json_body(
            couchdb.with_revisions(out.json_body(), parse_json(current.response.body))
        )

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
                out.method, out.url, self.policy, out.headers, out.sent_body, session=out.session
            )
        return await self.client.send(
            out.method, out.url, out.headers, out.sent_body, session=out.session
        )


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
