"""Admin authentication: a bearer token for the JSON API.

Only `/ca.pem` (the public CA certificate agents must trust) and the page's own sign-in and
static files are reachable without it. The admin page's own calls to `/api/*` authenticate
with its sign-in cookie instead (see pagesessions.py); those that change state must also
carry the page's CSRF token in `X-CSRF-Token`, else they are refused with 403.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import Handler, error_response
from undoproxy.admin.pagesessions import CSRF_HEADER, SAFE_METHODS, csrf_ok, page_session

PUBLIC_PATHS = frozenset({"/ca.pem"})


def bearer_ok(request: web.Request, token: str) -> bool:
    """True when the request carries `Authorization: Bearer <token>`."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


def is_public(path: str) -> bool:
    """Paths that need no bearer token (the page checks its own cookie)."""
    return path in PUBLIC_PATHS or not path.startswith("/api/")


@web.middleware
async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 for API calls without the admin token."""
    if is_public(request.path):
        return await handler(request)
    ctx = request.app[CONTEXT]
    if bearer_ok(request, ctx.token):
        return await handler(request)
    page = page_session(request)
    if page is not None:
        if request.method not in SAFE_METHODS and not csrf_ok(
            request.headers.get(CSRF_HEADER), page
        ):
            return error_response(
                403, "csrf_failed", f"the page's {CSRF_HEADER} header is missing or wrong"
            )
        request["page_user"] = page.name
        return await handler(request)
    return error_response(
        401,
        "unauthorized",
        "missing or wrong admin token: send "
        "'Authorization: Bearer <token>' (UNDOPROXY_ADMIN_TOKEN)",
    )
