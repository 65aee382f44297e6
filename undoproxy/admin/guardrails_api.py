"""The kill switch and resolve: freeze a session or everything, and mark a step undone by hand.

- `POST /api/sessions/{id}/freeze` / `.../unfreeze`: while frozen, the proxy answers every
  mutation of the session 403 `undoproxy_frozen` (proxy/gate.py); freezing also denies the
  session's held requests. Answers the session, with `denied`: how many were denied.
- `POST /api/freeze` / `POST /api/unfreeze`: the same for every session at once. Answers
  `{frozen_all, denied}`. Both switches are kept in the journal: a restart keeps them.
- `POST /api/steps/{id}/resolve` `{reason, by?}`: a person undid a step by hand. Only a step
  rollback could not undo (or whose outcome is unknown) can be resolved; it becomes
  `resolved` with who, when and why, and its session `rolled_back` once every mutation step
  is undone (`rollback.fully_rolled_back`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiohttp import web

from undoproxy.admin.api import session_or_404
from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.admin.views import session_json, step_json
from undoproxy.approvals.queue import FROZEN_ALL, FROZEN_SESSION
from undoproxy.errors import JournalError
from undoproxy.rollback import fully_rolled_back

# What a person may resolve: steps a rollback could not undo, or whose outcome is unknown.
RESOLVABLE = ("irreversible", "conflict", "compensation_failed", "unverified", "unknown")
T = TypeVar("T")
MAX_NAME = 64
MAX_REASON = 2000
# One resolve at a time: the check of a step's status and its write are one decision.
RESOLVING: web.AppKey[asyncio.Lock] = web.AppKey("resolving", asyncio.Lock)


def _no_fields(body: dict[str, Any]) -> None:
    if body:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(body))}")


async def _durably(change: Awaitable[T]) -> T:
    """Await a journal write; 503 when the journal cannot take it (nothing changed)."""
    try:
        return await change
    except JournalError as exc:
        raise ApiError(503, "journal_unavailable", str(exc)) from None


async def freeze_session(request: web.Request) -> web.Response:
    """Freeze a session: its mutations are refused, its held requests denied."""
    ctx = request.app[CONTEXT]
    _no_fields(await json_body(request))
    session = await session_or_404(request)
    # The switch first, then the queue: a request held from now on is denied as it arrives.
    await _durably(ctx.journal.set_frozen(session.id, True))
    denied = 0
    if ctx.approvals is not None:
        denied = await ctx.approvals.deny_session(session.id, FROZEN_SESSION)
    # Answer once nothing of the session is still on its way upstream: from this answer on,
    # the upstream receives no mutation of it.
    travelling = await ctx.inflight.drained(session.id) if ctx.inflight else 0
    return web.json_response(
        {**session_json(session), "denied": denied, "still_in_flight": travelling}
    )


async def unfreeze_session(request: web.Request) -> web.Response:
    """Unfreeze a session: its mutations go through the rules again."""
    ctx = request.app[CONTEXT]
    _no_fields(await json_body(request))
    session = await session_or_404(request)
    await _durably(ctx.journal.set_frozen(session.id, False))
    return web.json_response({**session_json(session), "denied": 0})


async def freeze_all(request: web.Request) -> web.Response:
    """Freeze every session, those to come included; deny every held request."""
    ctx = request.app[CONTEXT]
    _no_fields(await json_body(request))
    await _durably(ctx.journal.set_frozen_all(True))
    denied = 0
    if ctx.approvals is not None:
        denied = await ctx.approvals.deny_all(FROZEN_ALL)
    travelling = await ctx.inflight.drained() if ctx.inflight else 0
    return web.json_response({"frozen_all": True, "denied": denied, "still_in_flight": travelling})


async def unfreeze_all(request: web.Request) -> web.Response:
    """Turn the global switch off (sessions frozen one by one stay frozen)."""
    ctx = request.app[CONTEXT]
    _no_fields(await json_body(request))
    await _durably(ctx.journal.set_frozen_all(False))
    return web.json_response({"frozen_all": False, "denied": 0})


def _resolution(request: web.Request, body: dict[str, Any]) -> tuple[str, str]:
    """(who, why) from the body; 400 when the reason is missing or anything is mistyped."""
    unknown = set(body) - {"reason", "by"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    reason, by = body.get("reason"), body.get("by")
    if reason is None:
        raise ApiError(400, "bad_request", "reason is required: say how the step was undone")
    if not isinstance(reason, str) or not reason.strip():
        raise ApiError(400, "bad_request", "reason must be a non-empty string")
    if len(reason) > MAX_REASON:
        raise ApiError(400, "bad_request", f"reason must be at most {MAX_REASON} characters")
    if by is not None and (not isinstance(by, str) or not 0 < len(by.strip()) <= MAX_NAME):
        raise ApiError(400, "bad_request", f"by must be a name of 1-{MAX_NAME} characters")
    # Signed in on the page, the name given at sign-in resolves; it cannot be overridden.
    who = request.get("page_user") or (by.strip() if isinstance(by, str) else None) or "api"
    return str(who), reason.strip()


async def resolve_step(request: web.Request) -> web.Response:
    """Record that a person undid a step by hand; the session may then be `rolled_back`."""
    ctx = request.app[CONTEXT]
    journal = ctx.journal
    who, why = _resolution(request, await json_body(request))
    step_id = request.match_info["id"]
    async with request.app[RESOLVING]:
        await journal.writer.flush()
        step = await journal.step(step_id)
        if step is None:
            raise ApiError(404, "not_found", f"no step {step_id!r}")
        session = await journal.find_session(step.session_id)
        assert session is not None  # a step's session row outlives it (foreign key)
        if not step.is_mutation or step.status not in RESOLVABLE:
            what = "a read" if not step.is_mutation else step.status
            raise ApiError(
                409,
                "conflict",
                f"step {step.id} ({what}) cannot be resolved: only a mutation step that is "
                f"{', '.join(RESOLVABLE[:-1])} or {RESOLVABLE[-1]} can be",
            )
        if session.state == "rolling_back":
            raise ApiError(
                409,
                "conflict",
                f"session {session.id!r} is being rolled back; resolve once the rollback ends",
            )
        await _durably(
            journal.update_now(
                step,
                status="resolved",
                resolved_by=who,
                resolved_at=time.time(),
                resolved_reason=why,
            )
        )
        if session.state == "rollback_incomplete":
            steps = await journal.steps(session.id, mutations_only=True)
            if fully_rolled_back(steps) and session.state == "rollback_incomplete":
                await _durably(journal.set_session_state(session.id, "rolled_back"))
    return web.json_response({"step": step_json(step), "session": session_json(session)})


def setup(app: web.Application) -> None:
    """Give the admin app the lock resolves take."""
    app[RESOLVING] = asyncio.Lock()


ROUTES: list[web.AbstractRouteDef] = [
    web.post("/api/sessions/{id}/freeze", freeze_session),
    web.post("/api/sessions/{id}/unfreeze", unfreeze_session),
    web.post("/api/freeze", freeze_all),
    web.post("/api/unfreeze", unfreeze_all),
    web.post("/api/steps/{id}/resolve", resolve_step),
]
