"""Admin authentication: `Authorization: Bearer <token>` on every `/api/*` call.

The token is either the admin token (the CLI, scripts) or a page key the admin page got by
signing in with it (see pagesessions.py); a page key also names who decides. Only `/ca.pem`
(the public CA certificate agents must trust), the page's shell and its static files are
reachable without one: they hold nothing secret. Which origins may change state is checked
before this, in origin.py.
"""

from __future__ import annotations

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import Handler, error_response
from undoproxy.admin.pagesessions import bearer_is, page_session

PUBLIC_PATHS = frozenset({"/ca.pem"})


def is_public(path: str) -> bool:
    """Paths that need no bearer token (the page's views check the page key themselves)."""
    return path in PUBLIC_PATHS or not path.startswith("/api/")


@web.middleware
async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 for API calls without the admin token or a live page key."""
    if is_public(request.path):
        return await handler(request)
    if bearer_is(request, request.app[CONTEXT].token):
        return await handler(request)
    page = page_session(request)
    if page is not None:
        request["page_user"] = page.name
        return await handler(request)
    return error_response(
        401,
        "unauthorized",
        "missing or wrong admin token: send "
        "'Authorization: Bearer <token>' (UNDOPROXY_ADMIN_TOKEN)",
    )
