"""The admin page: its shell, the approvals queue, sessions and a session's timeline.

`GET /`, `/sessions` and `/sessions/{id}` answer a shell that holds nothing secret: the layout,
the sign-in form and one small script (static/admin.js, no build step, nothing from a CDN).
The script signs in with `POST /api/signin` (the admin token, once), keeps the page key it
gets in `sessionStorage`, and fetches each view's content with `?partial=1` and
`Authorization: Bearer <page key>`; it refreshes a view live when `/api/events` reports a
change. Every response carries a strict Content-Security-Policy (no inline script or style)
on top of escaping every value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from undoproxy.admin import page_views
from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError, error_response, json_body
from undoproxy.admin.html import Markup, el, render
from undoproxy.admin.pagesessions import (
    PAGE_SESSIONS,
    PageSessions,
    bearer,
    bearer_is,
    page_session,
)
from undoproxy.approvals.queue import ApprovalQueue
from undoproxy.store.listing import BadCursor

Main = Callable[[], Awaitable[Markup]]
STATIC_DIR = Path(__file__).parent / "static"
MAX_NAME = 64
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _queue(request: web.Request) -> ApprovalQueue | None:
    return request.app[CONTEXT].approvals


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)


async def _view(request: web.Request, view: str, title: str, main: Main) -> web.StreamResponse:
    """The shell (no secret, no data), or with `?partial=1` and a page key, the view itself."""
    if not request.query.get("partial"):
        nav = render(
            "nav.html",
            approvals_current="current" if view == "approvals" else "",
            sessions_current="current" if view != "approvals" else "",
        )
        return _html(
            render("layout.html", title=title, view=view, nav=nav, signin=render("signin.html"))
        )
    if page_session(request) is None:
        return error_response(401, "unauthorized", "signed out: sign in again")
    try:
        return _html(await main())
    except BadCursor:
        gone = "That page of the list is not there: start from the first."
        return _html(el("p", gone, class_="empty"))


def _cursor(request: web.Request) -> str | None:
    """The page of a list asked for (`?cursor=` from one of its pager links)."""
    return request.query.get("cursor") or None


async def queue_page(request: web.Request) -> web.StreamResponse:
    """`GET /`: the approvals queue."""

    async def main() -> Markup:
        queue = _queue(request)
        if queue is None:
            return el("p", "Approvals are not enabled.", class_="empty")
        shown, _ = await page_views.queue_main(
            queue, request.app[CONTEXT].journal, _cursor(request)
        )
        return shown

    return await _view(request, "approvals", "Approvals", main)


async def sessions_page(request: web.Request) -> web.StreamResponse:
    """`GET /sessions`: every session with its state and counts."""

    async def main() -> Markup:
        return await page_views.sessions_main(
            request.app[CONTEXT].journal, _queue(request), _cursor(request)
        )

    return await _view(request, "sessions", "Sessions", main)


async def timeline_page(request: web.Request) -> web.StreamResponse:
    """`GET /sessions/{id}`: a session's timeline, with its rollback button."""
    session_id = request.match_info["id"]

    async def main() -> Markup:
        shown = await page_views.timeline_main(
            request.app[CONTEXT].journal, session_id, _cursor(request)
        )
        return shown or el("p", f"No session {session_id!r}.", class_="empty")

    return await _view(request, "timeline", f"Session {session_id}", main)


async def sign_in(request: web.Request) -> web.Response:
    """`POST /api/signin` `{name}` with the admin token: a page key for this browser tab.

    Answers `{key, name}`; the page sends the key as its bearer token from then on.
    """
    if not bearer_is(request, request.app[CONTEXT].token):
        raise ApiError(401, "unauthorized", "sign in with the admin token")
    body = await json_body(request)
    unknown = set(body) - {"name"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
    name = body.get("name")
    if not isinstance(name, str) or not 0 < len(name.strip()) <= MAX_NAME:
        raise ApiError(400, "bad_request", f"name: give your name (1-{MAX_NAME} characters)")
    if not name.strip().isprintable():
        raise ApiError(400, "bad_request", "name: printable characters only")
    session = request.app[PAGE_SESSIONS].create(name.strip())
    return web.json_response({"key": session.key, "name": session.name}, status=201)


async def sign_out(request: web.Request) -> web.Response:
    """`POST /api/signout`: forget this page key (the admin token itself stays valid)."""
    request.app[PAGE_SESSIONS].drop(bearer(request))
    return web.json_response({"signed_out": True})


def setup(app: web.Application) -> None:
    """Give the admin app its store of signed-in browsers."""
    app[PAGE_SESSIONS] = PageSessions()


ROUTES: list[web.AbstractRouteDef] = [
    web.get("/", queue_page),
    web.get("/sessions", sessions_page),
    web.get("/sessions/{id}", timeline_page),
    web.post("/api/signin", sign_in),
    web.post("/api/signout", sign_out),
    web.static("/static", STATIC_DIR),
]
