"""`POST /api/archive`: retention through the running undoproxy (`undoproxy archive`).

`{older_than: "30d", to?: "/path", delete?: true, dry_run?: true}`: the sessions committed or
rolled back and idle for longer than `older_than` leave the journal, into the archive file
`to` (a new file, or a new file named for now in an existing directory: paths are on the
machine undoproxy runs on) or, with `delete`, nowhere; the chain records what left
(`store/archiving.py`). Answers what was removed; 409 when the journal does not verify or a
session changed meanwhile (nothing of that batch is removed).
"""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, json_body
from undoproxy.durations import parse_duration
from undoproxy.store import archiving


def archive_path(to: Path, now: float) -> Path:
    """The file an archive goes to: `to`, or a file named for `now` in the directory `to`."""
    if to.is_dir():
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        return to / f"undoproxy-archive-{stamp}.jsonl.gz"
    return to


async def archive(request: web.Request) -> web.Response:
    """Archive (or delete) closed sessions idle for longer than `older_than`."""
    ctx = request.app[CONTEXT]
    body = await json_body(request)
    unknown = set(body) - {"older_than", "to", "delete", "dry_run"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    try:
        older_than = parse_duration(body.get("older_than"))
    except ValueError as exc:
        raise ApiError(400, "bad_request", f"older_than: {exc}") from None
    to, delete, dry_run = body.get("to"), body.get("delete", False), body.get("dry_run", False)
    for name, value in (("delete", delete), ("dry_run", dry_run)):
        if not isinstance(value, bool):
            raise ApiError(400, "bad_request", f"{name} must be true or false")
    if to is not None and (not isinstance(to, str) or not Path(to).is_absolute()):
        raise ApiError(400, "bad_request", "to: an absolute path on undoproxy's machine")
    if (to is None) == (not delete) and not dry_run:
        raise ApiError(
            400, "bad_request", "give `to` (an archive file) or `delete: true`, one of the two"
        )
    now = time.time()
    target = archive_path(Path(to), now) if to is not None else None
    if target is not None and not target.parent.is_dir():
        raise ApiError(400, "bad_request", f"to: no directory {target.parent}")
    try:
        result = await archiving.archive(
            ctx.journal, idle_before=now - older_than, to=target, dry_run=dry_run
        )
    except archiving.ArchiveError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return web.json_response({**result.as_json(), "idle_before": now - older_than})


ROUTES: list[web.AbstractRouteDef] = [web.post("/api/archive", archive)]
