"""The email pack's correction: sent by rollback at most once, and reported as it went.

An email step stays `irreversible` (an email cannot be unsent); with a correction configured
its record carries `correction` (see `undoproxy/compensators/email.py`):
    {request, to, subject, idempotency_key?}   what to send, or
    {problem, subject}                          why it cannot be sent
and rollback adds `sent`: {state, answer, attempts, why}, where state is
    sending   recorded durably BEFORE the request goes out: a crash, a lost answer or an
              answer that does not prove it was refused (5xx, 408, 429) leaves it so, and the
              step `unverified`; it is never sent again (check the provider's log, resolve)
    sent      the provider accepted it (2xx): the step stays `irreversible`, the detail says so
    refused   the provider refused it (another 4xx): nothing was sent, the step is `failed`
              and a later rollback sends it again
A correction that cannot be built or sent (a signed request, no recipients) makes the step
`failed` with the reason: never hidden behind `irreversible`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from undoproxy import redact
from undoproxy.compensators.record import InverseRequest
from undoproxy.credentials import CredentialBox
from undoproxy.errors import JournalError
from undoproxy.rollback.outgoing import NotSendable, compensation_request
from undoproxy.rollback.verdict import Verdict
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamClient, UpstreamError

Durably = Callable[[Coroutine[Any, Any, None]], Awaitable[None]]
RESOLVE = "check the provider's log, then `undoproxy resolve STEP`"


class Corrector:
    """Sends an email step's correction through the provider the email went through."""

    def __init__(self, journal: Journal, client: UpstreamClient, box: CredentialBox) -> None:
        self.journal = journal
        self.client = client
        self.box = box

    async def run(
        self,
        step: Step,
        raw: dict[str, Any],
        irreversible: Verdict,
        dry_run: bool,
        durably: Durably,
    ) -> Verdict:
        """The step's verdict once its correction is decided (sent now, earlier, or not)."""
        corr = dict(raw.get("correction") or {})
        said = irreversible.detail
        what = f'the correction "{corr.get("subject", "")}"'
        who = ", ".join(str(a) for a in corr.get("to") or [])
        if corr.get("problem") or not isinstance(corr.get("request"), dict):
            why = corr.get("problem") or "no correction request was recorded"
            return Verdict("failed", f"{said}; {what} was not sent: {why}")
        sent = dict(corr.get("sent") or {})
        if sent.get("state") == "sent":
            return Verdict(
                "irreversible",
                f"{said}; {what} was sent to {who} by an earlier rollback "
                f"(HTTP {sent.get('answer')}); not sent again",
            )
        if sent.get("state") == "sending":
            return Verdict("unverified", f"{said}; {_maybe(what, who, sent)}; {RESOLVE}")
        if dry_run:
            return Verdict("irreversible", f"{said}; rollback would send {what} to {who}")
        try:
            out = compensation_request(
                InverseRequest.of(corr["request"]),
                step.url,
                self.box.open(step.credentials),
                force=False,
                session=step.session_id,
            )
        except NotSendable as exc:
            return Verdict("failed", f"{said}; {what} cannot be sent: {exc}")
        if corr.get("idempotency_key"):
            out.headers["Idempotency-Key"] = f"undoproxy-correction-{step.id}"
        sent = {"state": "sending", "attempts": int(sent.get("attempts") or 0) + 1}
        try:  # durably before it goes out: whatever happens next, it is never sent twice
            mark = {**raw, "correction": {**corr, "sent": sent}}
            await durably(self.journal.update_now(step, status="compensating", compensation=mark))
        except JournalError as exc:
            return Verdict(
                "failed",
                f"{said}; {what} could not be recorded before sending it ({exc}); nothing was sent",
            )
        where = f"{out.method} {redact.url(out.url)}"
        try:
            resp = await self.client.send(
                out.method, out.url, out.headers, out.body, session=out.session
            )
        except UpstreamError as exc:
            sent["why"] = f"{where}: {exc}"
            return Verdict(
                "unverified",
                f"{said}; {_maybe(what, who, sent)}; {RESOLVE}",
                _with(raw, corr, sent),
            )
        sent["answer"] = resp.status
        if 200 <= resp.status < 300:
            sent["state"] = "sent"
            return Verdict(
                "irreversible",
                f"{said}; {what} was sent to {who}: {where} answered {resp.status}",
                _with(raw, corr, sent),
            )
        excerpt = redact.text(resp.body[:200].decode("utf-8", "replace").strip())
        if 400 <= resp.status < 500 and resp.status not in (408, 429):
            sent["state"] = "refused"
            return Verdict(
                "failed",
                f"{said}; {what} was NOT sent: {where} answered HTTP {resp.status}: {excerpt}; "
                "a later rollback sends it again",
                _with(raw, corr, sent),
            )
        sent["why"] = f"{where} answered HTTP {resp.status}: {excerpt}"
        return Verdict(
            "unverified", f"{said}; {_maybe(what, who, sent)}; {RESOLVE}", _with(raw, corr, sent)
        )


def _maybe(what: str, who: str, sent: dict[str, Any]) -> str:
    why = sent.get("why") or "undoproxy stopped before its answer was recorded"
    return (
        f"{what} to {who} may have been sent ({why}); it is never sent twice, so it is not "
        "sent again"
    )


def _with(raw: dict[str, Any], corr: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "correction": {**corr, "sent": sent}}
