"""Snapshots and compensations, as a mitmproxy addon.

Before a mutation is forwarded: decide its compensation plan, GET the target with the agent's
own credentials when the plan needs it (restore, recreate, `snapshot:`), build what can be
known of the compensation, and hand it to the journal addon to be written ahead with the step
(the agent's credentials sealed for the compensation). A compensator may need more than that
GET (a PROPFIND of the properties, a GET of a MOVE's destination: `PreRead`s, see
`compensators/packs.reads_for`): they are sent the same way, and their answers are given to it
and stored with the compensation (`reads`). If the snapshot, or a read the compensator needs,
fails the mutation is not forwarded (502), a signed request included, unless the rule says
`on_snapshot_error: proceed` (then the step is irreversible; under `defaults.mutations:
hold-irreversible` only once a person approved it). After the response: complete the
compensation from it, and record what the agent's write produced (the drift-check baseline),
re-reading the target in the background when the response did not say.

A target larger than SNAPSHOT_IN_JOURNAL is not kept in the journal row: its body goes to an
encrypted body file of the session (undoproxy/bodyfiles.py) as it is read, up to
`proxy.max_body`, and the snapshot names it; a restore streams it back from there and the
verification compares by its SHA-256. A session's body files are removed once it is committed
or rolled back (nothing will replay them), and at start for sessions that were meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mitmproxy import http

from undoproxy import redact
from undoproxy.bodyfiles import BodyFiles
from undoproxy.compensators.build import complete, prepare
from undoproxy.compensators.model import (
    MAX_READ_ROUNDS,
    Facts,
    Irreversible,
    Plan,
    PreRead,
    Snapshot,
    parse_json,
    representation_headers,
)
from undoproxy.compensators.packs import reads_for
from undoproxy.compensators.readback import absent_answer
from undoproxy.compensators.record import nothing
from undoproxy.credentials import CredentialBox, credentials_for, signature_scheme, urls_in
from undoproxy.limits import MAX_REQUEST_BODY
from undoproxy.proxy import answers
from undoproxy.proxy.after_reads import AfterReads
from undoproxy.proxy.bodies import readable, request_body, response_body
from undoproxy.proxy.planning import plan_of
from undoproxy.proxy.state import FlowState, state_of
from undoproxy.proxy.steps import new_step
from undoproxy.proxy.target_reads import SNAPSHOT_LIMIT, SnapshotFailed, read_target
from undoproxy.store.journal import Journal
from undoproxy.upstream import (
    Spill,
    UpstreamClient,
    UpstreamResponse,
    snapshot_headers,
)

log = logging.getLogger(__name__)
SNAPSHOTS_TOTAL = 64 * 1024 * 1024  # all the snapshots of one step together, in the journal
CLOSED_STATES = frozenset({"committed", "rolled_back"})  # nothing replays their body files
SNAPSHOT_PARALLEL = 8


class Snapshots:
    """Takes snapshots and records compensations for every mutation."""

    def __init__(
        self,
        journal: Journal,
        client: UpstreamClient,
        box: CredentialBox,
        *,
        auto: bool,
        hold_irreversible: bool = False,
        files: BodyFiles | None = None,
        max_body: int = MAX_REQUEST_BODY,
    ) -> None:
        self.journal = journal
        self.client = client
        self.box = box
        self.auto = auto
        self.hold_irreversible = hold_irreversible
        self.files = files  # where targets too large for the journal are kept
        self.max_body = max_body
        self._stop_listening: list[Any] = []
        self.after = AfterReads(journal, self._read)
        self.after_reads = self.after.inflight  # a rollback waits for them

    async def take(
        self,
        url: str,
        flow: http.HTTPFlow,
        *,
        method: str = "GET",
        extra: dict[str, str] | None = None,
        body: bytes | None = None,
        absent_when: dict[str, Any] | None = None,
        spill: bool = False,
    ) -> Snapshot:
        """GET `url` as the agent would, retrying where that is safe; raises SnapshotFailed
        (also when the target is over SNAPSHOT_LIMIT: read no further than that; with
        `spill`, over `max_body`, a larger one going to a body file).
        Another read (a PROPFIND) gives its `method`, its own `extra` headers and `body`.

        The agent's credentials go only to the origin it sent the request to; request-specific
        headers (signatures, dates, content hashes, conditions) are never copied.
        """
        items = list(flow.request.headers.items(multi=True))
        state = state_of(flow)
        forward = (
            state is not None and state.rule is not None and state.rule.credentials == "forward"
        )
        headers = {
            **snapshot_headers(items),
            **credentials_for(
                url, flow.request.url, redact.credential_headers(items), forward=forward
            ),
        }
        to = None
        if spill and self.files is not None and state is not None:
            to = Spill(self.files, state.session_id, self.max_body)
        resp = await self._read(flow, url, method, {**headers, **(extra or {})}, body, spill=to)
        if resp.file is not None and not 200 <= resp.status < 300 and self.files is not None:
            self.files.discard(resp.file.name)  # an error page, however long: not a snapshot
        if resp.status in (404, 410):
            return Snapshot(url, resp.status)
        gone = absent_answer(absent_when, resp.status, resp.body)
        if gone:  # the API's own "no such thing" (AWS: 400 ResourceNotFoundException)
            return Snapshot(url, resp.status, resp.body, absent_answer=gone)
        challenge = resp.header("WWW-Authenticate")
        if resp.status == 401 and challenge and not redact.credential_headers(items):
            raise SnapshotFailed(
                f"{method} {redact.url(url)} answered HTTP 401: the upstream asks for "
                "credentials the request does not carry; its challenge was passed on",
                challenge,
            )
        if not 200 <= resp.status < 300:
            raise SnapshotFailed(f"{method} {redact.url(url)} answered HTTP {resp.status}")
        return Snapshot(
            url,
            resp.status,
            resp.body,
            resp.header("ETag"),
            resp.header("Last-Modified"),
            resp.header("Content-Type"),
            representation_headers(list(resp.headers.items())),
            file=resp.file,
        )

    async def _read(
        self,
        flow: http.HTTPFlow,
        url: str,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        *,
        keep: int = SNAPSHOT_LIMIT,
        need_all: bool = True,
        spill: Spill | None = None,
    ) -> UpstreamResponse:
        """One read of undoproxy's own (target_reads.read_target)."""
        return await read_target(
            self.client,
            flow,
            url,
            method,
            headers,
            body,
            keep=keep,
            need_all=need_all,
            spill=spill,
        )

    def _plan(self, flow: http.HTTPFlow, state: FlowState) -> Plan:
        return plan_of(flow, state, auto=self.auto, signers=self.client.signers)

    async def _take_all(self, plan: Plan, flow: http.HTTPFlow) -> dict[str, Snapshot]:
        """The plan's snapshot and its `more_snapshots`, a few at a time; SnapshotFailed if
        any fails or all of them together exceed SNAPSHOTS_TOTAL bytes."""
        assert plan.snapshot_url is not None
        urls = list(dict.fromkeys([plan.snapshot_url, *plan.more_snapshots]))
        gate = asyncio.Semaphore(SNAPSHOT_PARALLEL)

        async def one(url: str) -> Snapshot:
            async with gate:
                return await self.take(url, flow, spill=True)

        taken = await asyncio.gather(*(one(u) for u in urls))
        if sum(len(s.body) for s in taken) > SNAPSHOTS_TOTAL:
            raise SnapshotFailed(f"the targets together are larger than {SNAPSHOTS_TOTAL} bytes")
        return dict(zip(urls, taken, strict=True))

    async def _read_all(self, reads: list[PreRead], flow: http.HTTPFlow) -> dict[str, Snapshot]:
        """The compensator's reads, a few at a time; SnapshotFailed names the first needed one
        that failed (an optional one that fails is left out)."""
        gate = asyncio.Semaphore(SNAPSHOT_PARALLEL)

        async def one(read: PreRead) -> Snapshot | SnapshotFailed:
            async with gate:
                try:
                    return await self.take(
                        read.url,
                        flow,
                        method=read.method,
                        extra=read.headers,
                        body=read.body,
                        absent_when=read.absent_when,
                    )
                except SnapshotFailed as exc:
                    return exc

        answers = await asyncio.gather(*(one(r) for r in reads))
        out: dict[str, Snapshot] = {}
        for read, answer in zip(reads, answers, strict=True):
            if isinstance(answer, Snapshot):
                out[read.name] = answer
            elif not read.optional:
                raise answer
        if sum(len(s.body) for s in out.values()) > SNAPSHOTS_TOTAL:
            raise SnapshotFailed(f"the reads together are larger than {SNAPSHOTS_TOTAL} bytes")
        return out

    async def _pre_reads(self, plan: Plan, facts: Facts, flow: http.HTTPFlow) -> list[PreRead]:
        """Send the compensator's reads, round by round (a read may need an earlier one's
        answer), into `facts.reads`; the reads sent. Raises SnapshotFailed, Irreversible."""
        sent: list[PreRead] = []
        if plan.irreversible:
            return sent
        for _ in range(MAX_READ_ROUNDS):
            asked = {r.name for r in sent}
            wanted = [r for r in reads_for(plan, facts) if r.name not in asked]
            if not wanted:
                return sent
            facts.reads.update(await self._read_all(wanted, flow))
            sent += wanted
        if [r for r in reads_for(plan, facts) if r.name not in {r.name for r in sent}]:
            raise Irreversible(
                f"the compensator needs more than {MAX_READ_ROUNDS} rounds of reads before "
                "the step; it cannot be undone"
            )
        return sent

    def _failed_reason(self, flow: http.HTTPFlow, detail: str, signed: str | None) -> str:
        """Why a step whose snapshot failed, but which was forwarded, is irreversible."""
        detail = redact.text(detail)
        if signed is None:
            return f"the snapshot failed ({detail}) and the rule says on_snapshot_error: proceed"
        return (
            f"{self._signed_failure(flow, detail)}; the rule says on_snapshot_error: proceed, so "
            "it was forwarded without one"
        )

    def _signed_failure(self, flow: http.HTTPFlow, detail: str) -> str:
        """What failed when undoproxy's own signed read before a signed request failed."""
        state = state_of(flow)
        session = state.session_id if state is not None else None
        entry = self.client.signers.for_url(flow.request.url, session)
        key = f" with the {entry.describe()}" if entry is not None else ""
        return (
            f"the snapshot before it, signed by undoproxy{key}, failed ({detail}); check that "
            "key in signing: (a 403 says it is wrong or lacks the read permission, e.g. "
            "s3:GetObject / s3:GetObjectTagging, dynamodb:GetItem / DescribeTable, "
            "secretsmanager:GetSecretValue, ssm:GetParameter)"
        )

    def _may_proceed(self, state: FlowState) -> bool:
        """A step whose snapshot failed goes on irreversible only when its rule says so, and
        not under `defaults.mutations: hold-irreversible` unless a person approved it: such
        a step would have been held had its irreversibility been known."""
        rule = state.rule
        if rule is None or rule.on_snapshot_error != "proceed":
            return False
        return not self.hold_irreversible or state.action == "hold"  # held, then approved

    async def preview(self, flow: http.HTTPFlow, state: FlowState) -> dict[str, Any] | None:
        """The target as it is now, for the approval page's diff (None when not applicable)."""
        plan = self._plan(flow, state)
        if plan.snapshot_url is None:
            return None
        try:
            snap = await self.take(plan.snapshot_url, flow)
        except SnapshotFailed:
            return None
        body: Any = parse_json(snap.body)
        if body is None:
            body = snap.body.decode("utf-8", "replace")
        return {"url": snap.url, "status": snap.status, "body": body}

    async def request(self, flow: http.HTTPFlow) -> None:
        """Plan, snapshot and prepare the compensation of a mutation about to be forwarded."""
        state = state_of(flow)
        if state is None or not state.is_mutation or flow.response is not None:
            return
        plan = self._plan(flow, state)
        snapshot = None
        snapshots: dict[str, Snapshot] = {}
        if plan.snapshot_url is not None:
            try:
                snapshots = await self._take_all(plan, flow)
                snapshot = snapshots[plan.snapshot_url]
            except SnapshotFailed as exc:
                signed = signature_scheme(list(flow.request.headers.items(multi=True)))
                if not self._may_proceed(state):
                    detail = str(exc) if signed is None else self._signed_failure(flow, str(exc))
                    self._block(flow, state, plan.snapshot_url, detail, exc.challenge)
                    return
                snapshots = {}
                plan = Plan("irreversible", reason=self._failed_reason(flow, str(exc), signed))
        items = list(flow.request.headers.items(multi=True))
        facts = Facts(
            flow.request.method,
            flow.request.url,
            dict(state.captures),
            request_body(flow, state).body,
            snapshot,
            snapshots=snapshots,
            request_headers={k.lower(): v for k, v in items if not redact.is_secret_name(k)},
        )
        reads: list[PreRead] = []
        try:
            reads = await self._pre_reads(plan, facts, flow)
        except Irreversible as exc:
            plan = Plan("irreversible", reason=str(exc))
        except SnapshotFailed as exc:
            signed = signature_scheme(items)
            if not self._may_proceed(state):
                detail = str(exc) if signed is None else self._signed_failure(flow, str(exc))
                self._block(flow, state, flow.request.url, detail, exc.challenge)
                return
            plan = Plan("irreversible", reason=self._failed_reason(flow, str(exc), signed))
        comp = prepare(plan, facts)
        if facts.reads:
            comp["reads"] = {
                name: {**snap.to_json(), "method": read.method}
                for read in reads
                if (snap := facts.reads.get(read.name)) is not None
                for name in (read.name,)
            }
        if state.rule is not None and state.rule.credentials == "forward":
            comp["credentials"] = "forward"  # the rule sends the agent's credentials anywhere
        state.plan = (plan, facts)
        snapshot_json = snapshot.to_json() if snapshot else None
        state.pending_fields = {
            "snapshot": snapshot_json,
            "compensation": comp,
            # An irreversible step keeps no credentials, unless a correction is to be sent.
            "credentials": None
            if plan.irreversible and plan.correction is None
            else self._seal(flow, state, comp, snapshot_json),
        }

    def _seal(self, flow: http.HTTPFlow, state: FlowState, *records: Any) -> bytes | None:
        """The agent's credentials and the full form of the step's URLs, encrypted."""
        urls = {flow.request.url, *urls_in(list(records))}
        state.sealed_urls = frozenset(urls)
        headers = redact.credential_headers(flow.request.headers.items(multi=True))
        return self.box.seal(headers, urls)

    def _block(
        self,
        flow: http.HTTPFlow,
        state: FlowState,
        url: str,
        detail: str,
        challenge: str | None = None,
    ) -> None:
        log.warning(
            "not forwarding %s %s: snapshot failed: %s",
            flow.request.method,
            redact.url(flow.request.url),
            detail,
        )
        code = 401 if challenge else 502
        fields = {
            "status": "failed",
            "response_status": code,
            "error": f"not forwarded: the snapshot before it failed: {detail}",
            "compensation": nothing(
                f"never forwarded: the snapshot before it failed (undoproxy answered HTTP {code})",
                "not_forwarded",
                redact.text(detail),
            ),
        }
        if state.step is None:
            step = new_step(flow, state, self.journal, "failed")
            for name, value in fields.items():
                setattr(step, name, value)
            self.journal.record(step)
        else:
            self.journal.update(state.step, **fields)
        state.answered = True
        flow.response = answers.snapshot_failed(
            state.step.id if state.step else "", redact.url(url), detail, challenge
        )

    async def error(self, flow: http.HTTPFlow) -> None:
        """A stream cut short after the upstream answered: complete from what is known."""
        if flow.response is not None:
            await self.response(flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        """Complete the compensation from the response."""
        state = state_of(flow)
        if state is None or state.answered or state.plan is None or flow.response is None:
            return
        plan, facts = state.plan
        facts.response_status = flow.response.status_code
        facts.response_headers = dict(flow.response.headers.items())
        facts.response_body = readable(response_body(flow, state))
        comp = complete(plan, state.pending_fields["compensation"], facts)
        state.outcome_fields["compensation"] = comp
        if comp.get("ready") and not state.sealed_urls.issuperset(urls_in(comp)):
            # The response named URLs the write-ahead seal does not know (a Location with a
            # signed query, say): seal again, since the journal keeps them redacted.
            snapshot_json = state.pending_fields.get("snapshot")
            state.outcome_fields["credentials"] = self._seal(flow, state, comp, snapshot_json)
        await self.after.follow(flow, state, comp)

    # --- body files ---------------------------------------------------------------------------

    async def running(self) -> None:
        """Remove the body files of sessions closed while undoproxy was down; listen for
        sessions that close from now on (here or on another replica)."""
        if self.files is None:
            return
        for session_id in self.files.sessions():
            session = await self.journal.find_session(session_id)
            if session is None or session.state in CLOSED_STATES:
                self.files.forget(session_id)
        events = self.journal.events
        self._stop_listening = [events.listen(self._closed), events.listen_remote(self._closed)]

    def _closed(self, kind: str, data: dict[str, Any]) -> None:
        if self.files is None or kind != "session" or data.get("state") not in CLOSED_STATES:
            return
        if isinstance(data.get("id"), str):
            self.files.forget(data["id"])

    async def done(self) -> None:
        """Let in-flight after-reads finish, then close the client."""
        for stop in self._stop_listening:
            stop()
        self._stop_listening = []
        await self.after.done()
        await self.client.close()
