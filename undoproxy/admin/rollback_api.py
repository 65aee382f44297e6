"""`POST /api/sessions/{id}/rollback`: compensate a session LIFO and report every step.

Body (all optional): `{"force": bool, "dry_run": bool}`. Answers the report as JSON, or, when
the caller accepts `application/x-ndjson`, one line per step as it completes and a last line
`{"done": report}` (the CLI uses that to show progress).
"""

from __future__ import annotations

import json

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.rollback import RollbackRefused, StepResult

NDJSON = "application/x-ndjson"


async def rollback_session(request: web.Request) -> web.StreamResponse:
    """Roll a session back."""
    ctx = request.app[CONTEXT]
    session_id = request.match_info["id"]
    if session_id not in ctx.journal.sessions:
        raise ApiError(404, "not_found", f"no session {session_id!r}")
    if ctx.rollback is None:
        raise ApiError(503, "unavailable", "rollback is not available in this process")
    body = await json_body(request)
    unknown = set(body) - {"force", "dry_run"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    force, dry_run = bool(body.get("force", False)), bool(body.get("dry_run", False))
    session = ctx.journal.sessions[session_id]
    if session.state == "committed":
        raise ApiError(
            409, "conflict", f"session {session_id!r} is committed; it cannot be rolled back"
        )

    if not dry_run and ctx.approvals is not None:
        # A request of this session still waiting for a person must not be approved into a
        # session that is being undone.
        await ctx.approvals.deny_session(
            session_id, "the session is being rolled back; this request was never forwarded"
        )

    if NDJSON not in request.headers.get("Accept", ""):
        try:
            report = await ctx.rollback.run(session_id, force=force, dry_run=dry_run)
        except RollbackRefused as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return web.json_response(report.to_json())

    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-store"})
    started = False

    async def progress(result: StepResult) -> None:
        nonlocal started
        if not started:
            await response.prepare(request)
            started = True
        await response.write((json.dumps({"step": result.to_json()}) + "\n").encode())

    try:
        report = await ctx.rollback.run(session_id, force=force, dry_run=dry_run, progress=progress)
    except RollbackRefused as exc:
        if started:
            raise
        raise ApiError(409, "conflict", str(exc)) from None
    if not started:
        await response.prepare(request)
    await response.write((json.dumps({"done": report.to_json()}) + "\n").encode())
    await response.write_eof()
    return response
