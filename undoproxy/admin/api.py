"""The JSON API for sessions: create, list, show, commit, export; plus info and the CA.

Lists come a page at a time (`store.listing`): `?limit=N&cursor=C`, and each answer carries
the list's `total` and the `next` cursor (null on the last page)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from undoproxy import __version__, eventloop
from undoproxy.admin import export
from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.admin.views import session_json, step_json
from undoproxy.store import listing
from undoproxy.store.records import SESSION_STATES, Session

_SESSION_ID = re.compile(r"^[A-Za-z0-9._~-]{1,128}$")


async def session_or_404(request: web.Request) -> Session:
    """The session the URL names (`{id}`), also one another replica created a moment ago;
    404 when there is none."""
    session_id = request.match_info["id"]
    session = await request.app[CONTEXT].journal.find_session(session_id)
    if session is None:
        raise ApiError(404, "not_found", f"no session {session_id!r}")
    return session


async def info(request: web.Request) -> web.Response:
    """Where the proxy listens and where its CA is (what `undoproxy env` needs), and whether
    the global kill switch is on."""
    ctx = request.app[CONTEXT]
    return web.json_response(
        {
            "version": __version__,
            "proxy_url": ctx.proxy_url(),
            "auth": ctx.config.proxy_auth,
            "ca_cert": str(ctx.ca_cert),
            "ca_bundle": str(ctx.ca_bundle),
            "frozen_all": ctx.journal.frozen_all,  # the global kill switch
            "event_loop": eventloop.name(asyncio.get_running_loop()),
        }
    )


async def ca_pem(request: web.Request) -> web.FileResponse:
    """The CA certificate agents must trust (public: no token)."""
    return web.FileResponse(
        request.app[CONTEXT].ca_cert, headers={"Content-Type": "application/x-pem-file"}
    )


async def create_session(request: web.Request) -> web.Response:
    """Create a session, or return the existing one with that id (201 / 200)."""
    ctx = request.app[CONTEXT]
    body = await json_body(request)
    session_id = body.get("id")
    for key in ("id", "intent", "agent"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise ApiError(400, "bad_request", f"{key} must be a string")
    unknown = set(body) - {"id", "intent", "agent"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    status = 200
    if session_id is None:
        session = ctx.journal.add_session(Session(id=_fresh_id(ctx.journal.sessions)))
        status = 201
    else:
        assert isinstance(session_id, str)
        if not _SESSION_ID.match(session_id):
            raise ApiError(400, "bad_request", "id: 1-128 characters of A-Z a-z 0-9 . _ ~ -")
        existing = await ctx.journal.find_session(session_id)  # maybe made on another replica
        if existing is None:
            session = ctx.journal.add_session(Session(id=session_id))
            status = 201
        else:
            session = existing
    if body.get("intent") is not None or body.get("agent") is not None:
        session.intent = str(body.get("intent") or session.intent or "") or None
        session.agent = str(body.get("agent") or session.agent or "") or None
        ctx.journal.writer.submit(
            "UPDATE sessions SET intent=?, agent=? WHERE id=?",
            (session.intent, session.agent, session.id),
        )
    await ctx.journal.writer.flush()
    return web.json_response(
        {
            **session_json(session),
            "token": session.token,
            "proxy_url": ctx.proxy_url(session.id, session.token),
        },
        status=status,
    )


def page_params(request: web.Request, default: int) -> tuple[int, str | None]:
    """`?limit=` (1 to listing.MAX_PAGE, else `default`) and `?cursor=`; 400 when malformed."""
    try:
        limit = listing.page_size(request.query.get("limit"), default)
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return limit, request.query.get("cursor") or None


async def paged(read: Any) -> Any:
    """Await a page read; a cursor this list did not hand out is 400."""
    try:
        return await read
    except listing.BadCursor as exc:
        raise ApiError(400, "bad_request", f"cursor: {exc}") from None


def _fresh_id(existing: Any) -> str:
    from undoproxy.store.records import new_id

    while True:
        candidate = new_id("s")
        if candidate not in existing:
            return candidate


async def list_sessions(request: web.Request) -> web.Response:
    """Sessions newest first, optionally of one state, a page at a time, with their counts."""
    ctx = request.app[CONTEXT]
    state = request.query.get("state")
    if state is not None and state not in SESSION_STATES:
        raise ApiError(
            400, "bad_request", f"state must be one of {', '.join(SESSION_STATES)}, got {state!r}"
        )
    limit, cursor = page_params(request, listing.SESSIONS)
    await ctx.journal.writer.flush()
    page = await paged(listing.sessions(ctx.journal, state=state, limit=limit, cursor=cursor))
    shown = [listed_json(row) for row in page.items]
    return web.json_response({"sessions": shown, "total": page.total, "next": page.next})


def listed_json(row: dict[str, Any]) -> dict[str, Any]:
    """A session as a page of `listing.sessions` has it (counts included), for the API."""
    session = Session(
        id=row["id"],
        token="",
        intent=row["intent"],
        agent=row["agent"],
        state=row["state"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        frozen=row["frozen"],
    )
    return session_json(session, row)


ORDERS = ("asc", "desc")


async def show_session(request: web.Request) -> web.Response:
    """A session with its steps, reads included, in order (`?order=desc`: newest first), a
    page at a time: `total` is how many steps it has, `next` the cursor of the next page."""
    ctx = request.app[CONTEXT]
    session = await session_or_404(request)
    limit, cursor = page_params(request, listing.STEPS)
    order = request.query.get("order", "asc")
    if order not in ORDERS:
        raise ApiError(400, "bad_request", f"order must be asc or desc, got {order!r}")
    await ctx.journal.writer.flush()
    page = await paged(
        listing.steps(
            ctx.journal, session.id, limit=limit, cursor=cursor, newest_first=order == "desc"
        )
    )
    counts = (await ctx.journal.step_counts([session.id])).get(session.id, {})
    return web.json_response(
        {
            **session_json(session, counts),
            "steps": [step_json(s) for s in page.items],
            "total": page.total,
            "next": page.next,
        }
    )


async def commit_session(request: web.Request) -> web.Response:
    """Close a session: its steps stay as they are; rollback is refused from now on."""
    ctx = request.app[CONTEXT]
    session = await session_or_404(request)
    if session.state == "committed":
        return web.json_response(session_json(session))
    if session.state != "open":
        raise ApiError(
            409,
            "conflict",
            f"session {session.id!r} is {session.state}; only an open session can be committed",
        )
    await ctx.journal.set_session_state(session.id, "committed")
    return web.json_response(session_json(session))


EXPORT_PAGE = 200  # steps read (and held in memory) at a time while an export streams


async def export_session(request: web.Request) -> web.StreamResponse:
    """The session's steps as JSON lines, HAR, CSV or Markdown, secrets redacted, streamed a
    page of steps at a time (memory does not grow with the session)."""
    ctx = request.app[CONTEXT]
    session = await session_or_404(request)
    fmt = request.query.get("format", "jsonl")
    if fmt not in export.FORMATS:
        raise ApiError(400, "bad_request", f"format must be one of {', '.join(export.FORMATS)}")
    await ctx.journal.writer.flush()
    counts = (await ctx.journal.step_counts([session.id])).get(session.id, {})
    shape = export.streamed(fmt, session, counts.get("steps", 0), counts.get("mutations", 0))
    response = web.StreamResponse(headers={"Content-Type": f"{shape.content_type}; charset=utf-8"})
    await response.prepare(request)
    await response.write(shape.head.encode())
    cursor: str | None = None
    first = True
    while True:
        page = await listing.steps(ctx.journal, session.id, limit=EXPORT_PAGE, cursor=cursor)
        await response.write(shape.page(page.items, first).encode())
        first = False
        if page.next is None:
            break
        cursor = page.next
    await response.write(shape.tail.encode())
    await response.write_eof()
    return response
