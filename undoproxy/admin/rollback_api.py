"""`POST /api/sessions/{id}/rollback`: compensate a session LIFO and report every step.

Body (all optional): `{"force": true|false, "dry_run": true|false}` (JSON booleans only: a
string such as "false" is refused with 400, never read as true). Answers the report as JSON,
or, when the caller accepts `application/x-ndjson`, one line per step as it completes and a
last line `{"done": report}` (the CLI uses that to show progress).

The rollback runs in a task of its own: a client that goes away (Ctrl-C on `undoproxy
rollback`, a closed page) never stops it half-way; its progress lines are then dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.approvals.queue import ROLLING_BACK
from undoproxy.rollback import Report, RollbackRefused, StepResult

log = logging.getLogger(__name__)
NDJSON = "application/x-ndjson"
FLAGS = ("force", "dry_run")
# Rollbacks outlive the request that started them; keep a reference until they finish.
_RUNNING: set[asyncio.Task[Report]] = set()


def _flags(body: dict[str, object]) -> dict[str, bool]:
    unknown = set(body) - set(FLAGS)
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    flags = {}
    for name in FLAGS:
        value = body.get(name, False)
        if not isinstance(value, bool):
            raise ApiError(
                400, "bad_request", f"{name} must be true or false (a JSON boolean), not {value!r}"
            )
        flags[name] = value
    return flags


def _finished(task: asyncio.Task[Report]) -> None:
    _RUNNING.discard(task)
    error = None if task.cancelled() else task.exception()
    if error is not None and not isinstance(error, RollbackRefused):
        log.error("rollback %s failed", task.get_name(), exc_info=error)


async def rollback_session(request: web.Request) -> web.StreamResponse:
    """Roll a session back."""
    ctx = request.app[CONTEXT]
    session_id = request.match_info["id"]
    session = await ctx.journal.find_session(session_id)
    if session is None:
        raise ApiError(404, "not_found", f"no session {session_id!r}")
    if ctx.rollback is None:
        raise ApiError(503, "unavailable", "rollback is not available in this process")
    flags = _flags(await json_body(request))
    force, dry_run = flags["force"], flags["dry_run"]
    if session.state == "committed":
        raise ApiError(
            409, "conflict", f"session {session_id!r} is committed; it cannot be rolled back"
        )

    if not dry_run and ctx.approvals is not None:
        # A request of this session still waiting for a person must not be approved into a
        # session that is being undone.
        await ctx.approvals.deny_session(session_id, ROLLING_BACK)

    streaming = NDJSON in request.headers.get("Accept", "")
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-store"})
    listening = streaming

    async def progress(result: StepResult) -> None:
        nonlocal listening
        if not listening:
            return
        try:
            if not response.prepared:
                await response.prepare(request)
            await response.write((json.dumps({"step": result.to_json()}) + "\n").encode())
        except (ConnectionError, RuntimeError) as exc:  # the client went away: carry on
            listening = False
            log.info("rollback of %s: the client went away (%s); it goes on", session_id, exc)

    rollback = ctx.rollback
    task = asyncio.get_running_loop().create_task(
        rollback.run(session_id, force=force, dry_run=dry_run, progress=progress),
        name=f"rollback-{session_id}",
    )
    _RUNNING.add(task)
    task.add_done_callback(_finished)
    try:
        report = await asyncio.shield(task)
    except RollbackRefused as exc:
        if response.prepared:
            raise
        raise ApiError(409, "conflict", str(exc)) from None
    if not streaming:
        return web.json_response(report.to_json())
    if listening:
        try:
            if not response.prepared:
                await response.prepare(request)
            await response.write((json.dumps({"done": report.to_json()}) + "\n").encode())
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:  # gone before the last line: no error
            log.info("rollback of %s: the client went away (%s) before its report", session_id, exc)
    return response
