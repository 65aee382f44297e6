"""The JSON API for sessions: create, list, show, commit, export; plus info and the CA."""

from __future__ import annotations

import asyncio
import json
import re

from aiohttp import web

from undoproxy import __version__, eventloop
from undoproxy.admin import export
from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.admin.views import session_json, step_json
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


def _fresh_id(existing: dict[str, Session]) -> str:
    from undoproxy.store.records import new_id

    while True:
        candidate = new_id("s")
        if candidate not in existing:
            return candidate


async def list_sessions(request: web.Request) -> web.Response:
    """Every session, newest first, optionally of one state."""
    ctx = request.app[CONTEXT]
    state = request.query.get("state")
    if state is not None and state not in SESSION_STATES:
        raise ApiError(
            400, "bad_request", f"state must be one of {', '.join(SESSION_STATES)}, got {state!r}"
        )
    await ctx.journal.writer.flush()
    counts = await ctx.journal.step_counts()
    sessions = sorted(ctx.journal.sessions.values(), key=lambda s: s.created_at, reverse=True)
    return web.json_response(
        {
            "sessions": [
                session_json(s, counts.get(s.id, {}))
                for s in sessions
                if state is None or s.state == state
            ]
        }
    )


async def show_session(request: web.Request) -> web.Response:
    """A session with every step it made, reads included, in order."""
    ctx = request.app[CONTEXT]
    session = await session_or_404(request)
    await ctx.journal.writer.flush()
    steps = await ctx.journal.steps(session.id)
    counts = {"steps": len(steps), "mutations": sum(s.is_mutation for s in steps)}
    return web.json_response(
        {**session_json(session, counts), "steps": [step_json(s) for s in steps]}
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


async def export_session(request: web.Request) -> web.StreamResponse:
    """The session's steps as JSON lines, HAR, CSV or Markdown, secrets redacted."""
    ctx = request.app[CONTEXT]
    session = await session_or_404(request)
    fmt = request.query.get("format", "jsonl")
    if fmt not in export.FORMATS:
        raise ApiError(400, "bad_request", f"format must be one of {', '.join(export.FORMATS)}")
    await ctx.journal.writer.flush()
    steps = await ctx.journal.steps(session.id)
    if fmt == "jsonl":
        text = "".join(json.dumps(step_json(s)) + "\n" for s in steps)
        return web.Response(text=text, content_type="application/x-ndjson")
    if fmt == "csv":
        return web.Response(text=export.csv_text(steps), content_type="text/csv")
    if fmt == "md":
        return web.Response(text=export.markdown(session, steps), content_type="text/markdown")
    return web.json_response(export.har(session, steps))
