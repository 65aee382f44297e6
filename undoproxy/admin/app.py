"""`create_app(ctx) -> web.Application`: the admin API and page, routes in one table."""

from __future__ import annotations

from aiohttp import web

from undoproxy.admin import (
    api,
    approvals_api,
    archive_api,
    events_api,
    guardrails_api,
    metrics_api,
    page,
    rollback_api,
)
from undoproxy.admin.auth import require_token
from undoproxy.admin.context import CONTEXT, AdminContext
from undoproxy.admin.errors import json_errors
from undoproxy.admin.origin import same_origin_changes

ROUTES: list[web.AbstractRouteDef] = [
    web.get("/ca.pem", api.ca_pem),
    web.get("/api/info", api.info),
    web.post("/api/sessions", api.create_session),
    web.get("/api/sessions", api.list_sessions),
    web.get("/api/sessions/{id}", api.show_session),
    web.post("/api/sessions/{id}/commit", api.commit_session),
    web.post("/api/sessions/{id}/rollback", rollback_api.rollback_session),
    web.get("/api/sessions/{id}/export", api.export_session),
    *guardrails_api.ROUTES,
    *approvals_api.ROUTES,
    *archive_api.ROUTES,
    *events_api.ROUTES,
    *metrics_api.ROUTES,
    *page.ROUTES,
]


async def _same_origin_reads(request: web.Request, response: web.StreamResponse) -> None:
    # No other origin (another port of this host included) may embed or read what we answer,
    # even where a browser would not ask us first (<script src>, <img src>).
    response.headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


def create_app(
    ctx: AdminContext, extra_routes: list[web.AbstractRouteDef] | None = None
) -> web.Application:
    """The admin application for one running undoproxy."""
    app = web.Application(
        middlewares=[json_errors, same_origin_changes, require_token], client_max_size=1024**2
    )
    app.on_response_prepare.append(_same_origin_reads)
    app[CONTEXT] = ctx
    page.setup(app)
    events_api.setup(app)
    metrics_api.setup(app)
    guardrails_api.setup(app)
    app.add_routes(ROUTES)
    if extra_routes:
        app.add_routes(extra_routes)
    return app
