"""`GET /metrics`: the Prometheus scrape endpoint, with the admin token like every API call.

The metrics (undoproxy/metrics.py) are fed by the event bus from the moment the app is created;
this module only wires them to the app and serves them. Prometheus sends the token with
`authorization: {credentials: ...}` in its scrape config (docs/operations.md).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import error_response
from undoproxy.admin.pagesessions import bearer_is
from undoproxy.metrics import Metrics

METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)


async def scrape(request: web.Request) -> web.Response:
    """The metrics in Prometheus text format (OpenMetrics when the scraper asks for it)."""
    # Not under /api/, so the token middleware lets it through: checked here, the same way.
    if not bearer_is(request, request.app[CONTEXT].token):
        return error_response(
            401,
            "unauthorized",
            "missing or wrong admin token: send 'Authorization: Bearer <token>' "
            "(UNDOPROXY_ADMIN_TOKEN)",
        )
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return web.Response(
        body=encode(request.app[METRICS].registry),
        headers={"Content-Type": content_type, "Cache-Control": "no-store"},
    )


def setup(app: web.Application) -> None:
    """Start counting this app's undoproxy's events; stop when the app is cleaned up."""
    metrics = app[METRICS] = Metrics()
    stop = app[CONTEXT].journal.events.listen(metrics.observe)

    async def _stop(_: web.Application) -> None:
        stop()

    app.on_cleanup.append(_stop)


ROUTES: list[web.AbstractRouteDef] = [web.get("/metrics", scrape)]
