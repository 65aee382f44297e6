"""Reads right after a mutation: what the step left, read before anyone else can change it.

This after-image is the drift check's baseline (a target someone changed since the agent's
write is a `conflict`, never overwritten) and, for a target that read as absent before, the
evidence that the write is where undoproxy reads at all (rollback/decide.py). The write's own
answer is never taken for it (it may be `{"ok": true}`): a GET reads the target, hashed as it
streams, its JSON kept when small (sealed at rest). An RPC pack's after-image is its read-back's
own request, made before the agent has its answer. A rollback waits for the reads still in
flight for its session (`inflight`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mitmproxy import http

from undoproxy import redact
from undoproxy.compensators.model import AFTER_BODY_LIMIT, is_tombstone, parse_json
from undoproxy.compensators.readback import absent_answer, request_of
from undoproxy.compensators.rpc import left_after
from undoproxy.credentials import credentials_for
from undoproxy.inflight import InFlight
from undoproxy.proxy.state import FlowState
from undoproxy.proxy.target_reads import SNAPSHOT_LIMIT, SnapshotFailed
from undoproxy.store.journal import Journal
from undoproxy.upstream import UpstreamResponse, snapshot_headers

log = logging.getLogger(__name__)
Read = Callable[..., Awaitable[UpstreamResponse]]


class AfterReads:
    """Reads what each mutation left, in the background or (RPC packs) before its answer."""

    def __init__(self, journal: Journal, read: Read) -> None:
        self.journal = journal
        self._read = read
        # per session, until their after-image is recorded: a rollback waits for them
        self.inflight = InFlight()
        self._background: set[asyncio.Task[None]] = set()

    async def follow(self, flow: http.HTTPFlow, state: FlowState, comp: dict[str, Any]) -> None:
        """Read what the step left when its compensation record asks for it."""
        if not comp.get("needs_after_read"):
            return
        spec = comp.get("readback")
        if isinstance(spec, dict) and "left_paths" in spec:
            # What an RPC step left, read before the agent has its answer: nothing the agent
            # does next (or anyone it tells) can come first and be taken for the step's.
            after = await self._read_after_rpc(flow, state, spec)
            if after is not None:
                comp["after"], comp["needs_after_read"] = after, False
            return
        if comp.get("snapshot_url") and state.step:
            self.inflight.started(state.session_id)
            task = asyncio.get_running_loop().create_task(
                self._after_read(flow, state, comp), name="after-read"
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def done(self) -> None:
        """Let the reads still in flight finish (briefly)."""
        if self._background:
            await asyncio.wait(self._background, timeout=5)

    async def _after_read(
        self, flow: http.HTTPFlow, state: FlowState, comp: dict[str, Any]
    ) -> None:
        # The response did not show the result of the write: read it, so that rollback can
        # tell later whether someone else changed the target since (and, for a target that
        # read as absent before, whether the write is where undoproxy reads at all). Large
        # targets are hashed as they stream, never kept.
        try:
            await self._read_after(flow, state, comp)
        finally:
            self.inflight.ended(state.session_id)

    async def _read_after_rpc(
        self, flow: http.HTTPFlow, state: FlowState, spec: dict[str, Any]
    ) -> dict[str, Any] | None:
        """An RPC pack's read right after the step (its read-back's own request): what the
        step left, as digests of the fields its drift check compares (compensators/rpc.py);
        None when it cannot be read (no drift check then, never a guess)."""
        method, extra, body = request_of(spec)
        url = str(spec.get("url") or "")
        items = list(flow.request.headers.items(multi=True))
        headers = {
            **snapshot_headers(items),
            **credentials_for(url, flow.request.url, redact.credential_headers(items)),
            **extra,
        }
        try:
            resp = await self._read(
                flow, url, method, headers, body, keep=SNAPSHOT_LIMIT, need_all=True
            )
        except SnapshotFailed as exc:
            log.info("could not read the result of step %s: %s", state.step and state.step.id, exc)
            return None
        gone = resp.status in (404, 410) or bool(
            absent_answer(spec.get("absent_when"), resp.status, resp.body)
        )
        if not (200 <= resp.status < 300 or gone):
            step = state.step.id if state.step else None
            log.info("could not read the result of step %s: HTTP %s", step, resp.status)
            return None
        return left_after(spec, gone, resp.body)

    async def _read_after(
        self, flow: http.HTTPFlow, state: FlowState, comp: dict[str, Any]
    ) -> None:
        url = comp["snapshot_url"]
        items = list(flow.request.headers.items(multi=True))
        headers = {
            **snapshot_headers(items),
            **credentials_for(url, flow.request.url, redact.credential_headers(items)),
        }
        try:
            resp = await self._read(
                flow, url, "GET", headers, None, keep=AFTER_BODY_LIMIT, need_all=False
            )
        except SnapshotFailed as exc:
            log.info("could not read the result of step %s: %s", state.step and state.step.id, exc)
            return
        if not (200 <= resp.status < 300 or resp.status in (404, 410)):
            log.info(
                "could not read the result of step %s: HTTP %s",
                state.step and state.step.id,
                resp.status,
            )
            return
        exists = not (resp.status in (404, 410) or is_tombstone(resp.body))
        after: dict[str, Any] = {"exists": exists}
        if resp.header("ETag") and exists:
            after["etag"] = resp.header("ETag")
        elif exists:
            after["sha256"] = resp.sha256
            if resp.complete and parse_json(resp.body) is not None:
                after["body_b64"] = base64.b64encode(resp.body).decode()  # sealed at rest
        if state.step is not None:
            # Only `after` changes: the outcome written before it keeps the rest of the record.
            self.journal.set_after(state.step, after)
