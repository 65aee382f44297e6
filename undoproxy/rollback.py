"""Session rollback: send each mutation's compensation, newest first, and tell the truth.

Each mutation step ends as one of
    compensated   its compensation was applied (or what it created is already gone)
    failed        the compensation could not be applied (upstream down, error answer)
    conflict      the target changed since the agent's write: nothing was overwritten
    irreversible  no compensation exists; a person must undo it by hand
    skipped       nothing to undo (never forwarded, failed upstream, already compensated)
A failing step never stops the others. A compensated step is never sent twice, so a second
rollback retries only what is left. Only one rollback of a session runs at a time.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from undoproxy import redact
from undoproxy.compensators.model import Snapshot, content_hash, parse_json
from undoproxy.credentials import CredentialBox
from undoproxy.errors import UndoproxyError
from undoproxy.retry import RetryPolicy
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamClient, UpstreamError, UpstreamResponse

log = logging.getLogger(__name__)
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "PATCH"})
STEP_STATUS = {
    "compensated": "compensated",
    "failed": "compensation_failed",
    "conflict": "conflict",
    "irreversible": "irreversible",
}


class RollbackRefused(UndoproxyError):
    """The session cannot be rolled back now (committed, or a rollback is running)."""


@dataclass
class StepResult:
    """What rollback did with one mutation step."""

    id: str
    seq: int
    method: str
    url: str
    status: str
    detail: str
    compensation: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The report entry (URLs redacted)."""
        return asdict(self)


@dataclass
class Report:
    """The outcome of one rollback."""

    session: str
    state: str
    steps: list[StepResult]
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The API's answer: `{state, steps: [{id, status, detail}, ...]}` and more."""
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.status] = counts.get(s.status, 0) + 1
        return {
            "session": self.session,
            "state": self.state,
            "dry_run": self.dry_run,
            "counts": counts,
            "steps": [s.to_json() for s in self.steps],
        }


Progress = Callable[[StepResult], Awaitable[None]]


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
        try:
            await self.journal.writer.flush()
            if not dry_run:
                await self.journal.set_session_state(session_id, "rolling_back")
            steps = await self.journal.steps(session_id, mutations_only=True)
            results = []
            for step in reversed(steps):
                result = await self._undo(step, force=force, dry_run=dry_run)
                results.append(result)
                if result.status in ("failed", "conflict", "irreversible") and not dry_run:
                    log.warning(
                        "rollback of %s: step %d %s %s: %s: %s",
                        session_id,
                        step.seq,
                        step.method,
                        result.url,
                        result.status,
                        result.detail,
                    )
                if progress is not None:
                    await progress(result)
            complete = all(r.status in ("compensated", "skipped") for r in results)
            state = session.state
            if not dry_run:
                state = "rolled_back" if complete else "rollback_incomplete"
                await self.journal.set_session_state(session_id, state)
            return Report(session_id, state, results, dry_run)
        finally:
            self._running.discard(session_id)

    # --- one step ---------------------------------------------------------------------------

    async def _undo(self, step: Step, *, force: bool, dry_run: bool) -> StepResult:
        comp = step.compensation or {}
        result = StepResult(step.id, step.seq, step.method, redact.url(step.url), "skipped", "")
        if comp.get("ready"):
            result.compensation = {"method": comp["method"], "url": redact.url(comp["url"])}
        verdict = self._precheck(step, comp)
        if verdict is None:
            verdict = await self._drift(step, comp, force)
        if verdict is None and dry_run:
            verdict = ("planned", f"would send {comp['method']} {redact.url(comp['url'])}")
        if verdict is None:
            verdict = await self._send(step, comp, force)
        result.status, result.detail = verdict
        if not dry_run and result.status != "skipped":
            self.journal.update(
                step,
                status=STEP_STATUS.get(result.status, step.status),
                compensation_status=result.status,
                compensation_detail=result.detail,
            )
        elif not dry_run and step.compensation_status != "compensated":
            self.journal.update(
                step, compensation_status="skipped", compensation_detail=result.detail
            )
        return result

    @staticmethod
    def _precheck(step: Step, comp: dict[str, Any]) -> tuple[str, str] | None:
        """A verdict that needs no network, or None."""
        if step.compensation_status == "compensated" or step.status == "compensated":
            return "skipped", "already compensated by an earlier rollback"
        if step.status in ("held", "denied"):
            return "skipped", "never forwarded"
        if step.status == "pending":
            return "failed", (
                "the request is still in flight; roll back again once it has completed"
            )
        if step.status == "failed":
            why = f"HTTP {step.response_status}" if step.response_status else step.error
            return "skipped", f"the request failed upstream ({why}); nothing to undo"
        if comp.get("noop"):
            return "skipped", str(comp["noop"])
        if comp.get("reason") or not comp.get("ready"):
            reason = comp.get("reason") or (
                "the outcome is unknown and what it created cannot be identified"
                if step.status == "unknown"
                else "no compensation was recorded"
            )
            return "irreversible", f"{reason}; a person must undo this step by hand"
        return None

    async def _read(self, step: Step, url: str) -> UpstreamResponse:
        return await self.client.send_with_retries(
            "GET", url, self.policy, self.box.open(step.credentials)
        )

    async def _drift(self, step: Step, comp: dict[str, Any], force: bool) -> tuple[str, str] | None:
        """Conflict when the target changed since the agent's write (unless forced)."""
        target = comp.get("snapshot_url")
        if not target:
            return None
        try:
            if step.status == "unknown" and step.snapshot:
                current = await self._read(step, target)
                before = Snapshot.from_json(step.snapshot)
                if _same(current, before):
                    return "skipped", (
                        "the outcome was unknown and the target is as it was "
                        "before: the request did not take effect"
                    )
                return None  # it did take effect: undo it (no baseline to check drift)
            if force:
                return None
            if comp.get("check_absent"):
                current = await self._read(step, target)
                if 200 <= current.status < 300:
                    return "conflict", (
                        "the deleted resource exists again; nothing was "
                        "overwritten (use --force to recreate it anyway)"
                    )
                return None
            after = comp.get("after")
            if not after:
                return None
            current = await self._read(step, target)
        except UpstreamError as exc:
            return "failed", f"could not re-read the target before compensating: {exc}"
        changed = _changed(current, after)
        if changed:
            return "conflict", (
                f"the target changed since this step ({changed}); nothing was "
                "overwritten (use --force to restore anyway)"
            )
        return None

    async def _send(self, step: Step, comp: dict[str, Any], force: bool) -> tuple[str, str]:
        # If-Match closes the gap between the drift check and the write, where the API has ETags.
        after = comp.get("after") or {}
        if_match = after.get("etag") if comp["method"] == "PUT" and not force else None
        try:
            resp = await self._request(step, comp, if_match)
            if resp.status in (404, 405) and comp.get("fallback"):
                first = resp.status
                resp = await self._request(step, comp["fallback"])
                if 200 <= resp.status < 300:
                    where = resp.header("Location")
                    return "compensated", (
                        f"recreated with POST to the collection (PUT "
                        f"answered {first})" + (f"; new location {where}" if where else "")
                    )
        except UpstreamError as exc:
            return "failed", f"upstream unreachable: {exc}; a later rollback will retry"
        tries = f" after {resp.attempts} attempts" if resp.attempts > 1 else ""
        if 200 <= resp.status < 300 and comp.get("expect_ok") and not _json_ok(resp):
            excerpt = resp.body[:200].decode("utf-8", "replace").strip()
            return "failed", f"{comp['method']} answered {resp.status} but not ok: {excerpt}"
        if 200 <= resp.status < 300:
            return "compensated", f"{comp['method']} answered {resp.status}{tries}"
        if resp.status in (404, 410) and comp["method"] == "DELETE":
            return "compensated", f"already gone (DELETE answered {resp.status})"
        if resp.status == 412:
            return (
                "conflict",
                "the target changed since this step (If-Match failed); nothing was overwritten",
            )
        excerpt = resp.body[:200].decode("utf-8", "replace").strip()
        return "failed", f"{comp['method']} answered HTTP {resp.status}{tries}: {excerpt}"

    async def _request(
        self, step: Step, req: dict[str, Any], if_match: str | None = None
    ) -> UpstreamResponse:
        headers = {**self.box.open(step.credentials), **(req.get("headers") or {})}
        body = base64.b64decode(req["body_b64"]) if req.get("body_b64") else None
        if body is not None and req.get("content_type"):
            headers["Content-Type"] = req["content_type"]
        if if_match:
            headers["If-Match"] = if_match
        if req["method"] in IDEMPOTENT:
            return await self.client.send_with_retries(
                req["method"], req["url"], self.policy, headers, body
            )
        return await self.client.send(req["method"], req["url"], headers, body)


def _json_ok(resp: UpstreamResponse) -> bool:
    """For APIs that report errors inside a 2xx answer (Slack): `"ok": true`."""
    body = parse_json(resp.body)
    return isinstance(body, dict) and body.get("ok") is True


def _same(current: UpstreamResponse, before: Snapshot) -> bool:
    """True when the target now is what the snapshot saw."""
    if not before.existed:
        return current.status in (404, 410)
    return 200 <= current.status < 300 and content_hash(current.body) == content_hash(before.body)


def _changed(current: UpstreamResponse, after: dict[str, Any]) -> str:
    """How the target differs from what the agent's write produced ('' when it does not)."""
    exists = 200 <= current.status < 300
    if after.get("etag"):
        now = current.header("ETag")
        return "" if now == after["etag"] else f"ETag {after['etag']} is now {now}"
    if after.get("exists") is False:
        return "" if not exists else "it exists again"
    if not exists:
        return f"it is gone (GET answered {current.status})"
    if after.get("sha256") and content_hash(current.body) != after["sha256"]:
        return "its content differs from what the agent wrote"
    return ""
