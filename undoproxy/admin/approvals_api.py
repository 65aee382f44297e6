"""The JSON API for approvals: list them with their context, approve or deny one."""

from __future__ import annotations

from aiohttp import web

from undoproxy.admin.api import page_params, paged
from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.approvals.queue import ApprovalError, ApprovalQueue
from undoproxy.approvals.views import approval_json
from undoproxy.store import listing
from undoproxy.store.approvals import APPROVAL_STATES

MAX_NAME = 64
MAX_REASON = 2000


def queue_of(request: web.Request) -> ApprovalQueue:
    """The running undoproxy's approvals queue."""
    queue = request.app[CONTEXT].approvals
    if queue is None:
        raise ApiError(503, "unavailable", "approvals are not enabled in this undoproxy")
    return queue


async def list_approvals(request: web.Request) -> web.Response:
    """Approvals newest first (`?state=pending` for the queue), with their context, a page at
    a time: `total` is how many there are, `next` the cursor of the next page."""
    state = request.query.get("state")
    if state is not None and state not in APPROVAL_STATES:
        raise ApiError(
            400, "bad_request", f"state must be one of {', '.join(APPROVAL_STATES)}, got {state!r}"
        )
    session_id = request.query.get("session")
    limit, cursor = page_params(request, listing.APPROVALS)
    queue_of(request)  # 503 when approvals are not enabled
    journal = request.app[CONTEXT].journal
    await journal.writer.flush()
    page = await paged(
        listing.approvals(journal, state=state, session_id=session_id, limit=limit, cursor=cursor)
    )
    for known in {a.session_id for a in page.items}:  # a closed one's intent and agent
        await journal.find_session(known)
    return web.json_response(
        {
            "approvals": [approval_json(a, journal) for a in page.items],
            "total": page.total,
            "next": page.next,
        }
    )


async def show_approval(request: web.Request) -> web.Response:
    """One approval with its context."""
    queue = queue_of(request)
    approval = await queue.get(request.match_info["id"])
    if approval is None:
        raise ApiError(404, "not_found", f"no approval {request.match_info['id']!r}")
    return web.json_response(approval_json(approval, request.app[CONTEXT].journal))


async def _decide(request: web.Request, approve: bool) -> web.Response:
    body = await json_body(request)
    unknown = set(body) - {"reason", "by"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    reason, by = body.get("reason"), body.get("by")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise ApiError(400, "bad_request", f"reason must be a string of at most {MAX_REASON}")
    if by is not None and (not isinstance(by, str) or not 0 < len(by.strip()) <= MAX_NAME):
        raise ApiError(400, "bad_request", f"by must be a name of 1-{MAX_NAME} characters")
    # Signed in on the page, the name given at sign-in decides; it cannot be overridden.
    who = request.get("page_user") or (by.strip() if isinstance(by, str) else None) or "api"
    try:
        approval = await queue_of(request).decide(
            request.match_info["id"], approve=approve, by=str(who), reason=reason
        )
    except ApprovalError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    return web.json_response(approval_json(approval, request.app[CONTEXT].journal))


async def approve(request: web.Request) -> web.Response:
    """Approve: the held request (and identical ones waiting with it) is forwarded."""
    return await _decide(request, approve=True)


async def deny(request: web.Request) -> web.Response:
    """Deny: the agent gets 403 `undoproxy_denied` and nothing is forwarded."""
    return await _decide(request, approve=False)


ROUTES: list[web.AbstractRouteDef] = [
    web.get("/api/approvals", list_approvals),
    web.get("/api/approvals/{id}", show_approval),
    web.post("/api/approvals/{id}/approve", approve),
    web.post("/api/approvals/{id}/deny", deny),
]
