"""The admin page: sign-in, the approvals queue, sessions and a session's timeline.

Plain server-rendered HTML plus one small script (static/admin.js, no build step, nothing
from a CDN). Any view fetched with `?partial=1` answers only its main content: the script
uses that to refresh a view live when `/api/events` reports a change. Every page carries a
strict Content-Security-Policy (no inline script or style) on top of escaping every value.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from aiohttp import web

from undoproxy.admin import page_views
from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import error_response
from undoproxy.admin.html import Markup, el, render
from undoproxy.admin.pagesessions import (
    COOKIE,
    CSRF_FIELD,
    PAGE_SESSIONS,
    PageSession,
    PageSessions,
    clear_cookie,
    csrf_ok,
    page_session,
    set_cookie,
)
from undoproxy.approvals.queue import ApprovalQueue

STATIC_DIR = Path(__file__).parent / "static"
MAX_NAME = 64
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _queue(request: web.Request) -> ApprovalQueue | None:
    return request.app[CONTEXT].approvals


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={**HEADERS, "Location": location})


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)


async def _pending_count(request: web.Request) -> int:
    queue = _queue(request)
    return len(await queue.recent(state="pending", limit=1000)) if queue else 0


async def _page(
    request: web.Request, user: PageSession, view: str, title: str, main: Markup, pending: int
) -> web.Response:
    if request.query.get("partial"):
        return _html(main)
    nav = render(
        "nav.html",
        approvals_current="current" if view == "approvals" else "",
        sessions_current="current" if view != "approvals" else "",
        pending=pending,
        user=user.name,
        csrf=user.csrf,
    )
    return _html(render("layout.html", csrf=user.csrf, title=title, view=view, nav=nav, main=main))


def _signin(error: str = "", name: str = "", status: int = 200) -> web.Response:
    main = render(
        "signin.html",
        error=el("p", error, class_="error") if error else Markup(""),
        name=name,
    )
    return _html(
        render("layout.html", csrf="", title="Sign in", view="signin", nav="", main=main), status
    )


def _signed_out(request: web.Request) -> web.StreamResponse:
    if request.query.get("partial"):
        return error_response(401, "unauthorized", "signed out: reload the page to sign in")
    if request.path == "/":
        return _signin()
    return _see_other("/")


async def queue_page(request: web.Request) -> web.StreamResponse:
    """`GET /`: the approvals queue, or the sign-in form."""
    user = page_session(request)
    if user is None:
        return _signed_out(request)
    queue = _queue(request)
    if queue is None:
        main, pending = el("p", "Approvals are not enabled.", class_="empty"), 0
    else:
        main, pending = await page_views.queue_main(queue, request.app[CONTEXT].journal)
    return await _page(request, user, "approvals", "Approvals", main, pending)


async def sessions_page(request: web.Request) -> web.StreamResponse:
    """`GET /sessions`: every session with its state and counts."""
    user = page_session(request)
    if user is None:
        return _signed_out(request)
    main = await page_views.sessions_main(request.app[CONTEXT].journal, _queue(request))
    return await _page(request, user, "sessions", "Sessions", main, await _pending_count(request))


async def timeline_page(request: web.Request) -> web.StreamResponse:
    """`GET /sessions/{id}`: a session's timeline, with its rollback button."""
    user = page_session(request)
    if user is None:
        return _signed_out(request)
    session_id = request.match_info["id"]
    main = await page_views.timeline_main(request.app[CONTEXT].journal, session_id)
    if main is None:
        main = el("p", f"No session {session_id!r}.", class_="empty")
    pending = await _pending_count(request)
    return await _page(request, user, "timeline", f"Session {session_id}", main, pending)


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    return origin is None or origin in (f"http://{request.host}", f"https://{request.host}")


async def sign_in(request: web.Request) -> web.StreamResponse:
    """`POST /signin` (form: token, name): set the page cookie and go to the queue."""
    if not _same_origin(request):
        return _signin("Sign-in from another site was refused.", status=403)
    form = await request.post()
    token, name = str(form.get("token", "")), str(form.get("name", "")).strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        return _signin(f"Give your name (1-{MAX_NAME} characters).", name[:MAX_NAME], 400)
    expected = request.app[CONTEXT].token
    if not hmac.compare_digest(token.strip().encode(), expected.encode()):
        return _signin("That is not the admin token.", name, 401)
    session = request.app[PAGE_SESSIONS].create(name)
    response = _see_other("/")
    set_cookie(response, session)
    return response


async def sign_out(request: web.Request) -> web.StreamResponse:
    """`POST /signout` (form: csrf): forget this browser."""
    user = page_session(request)
    form = await request.post()
    if user is not None:
        if not csrf_ok(str(form.get(CSRF_FIELD, "")), user):
            return error_response(403, "csrf_failed", "the sign-out form's CSRF token is wrong")
        request.app[PAGE_SESSIONS].drop(request.cookies.get(COOKIE))
    response = _see_other("/")
    clear_cookie(response)
    return response


def setup(app: web.Application) -> None:
    """Give the admin app its store of signed-in browsers."""
    app[PAGE_SESSIONS] = PageSessions()


ROUTES: list[web.AbstractRouteDef] = [
    web.get("/", queue_page),
    web.post("/signin", sign_in),
    web.post("/signout", sign_out),
    web.get("/sessions", sessions_page),
    web.get("/sessions/{id}", timeline_page),
    web.static("/static", STATIC_DIR),
]
