"""`GET /api/sessions/{id}/tls-failures`: the session's failed TLS handshakes with undoproxy
(proxy/tls_failures.py), newest last. `undoproxy doctor` reads them: a client that refused
undoproxy's certificate with a TLS alert does not trust its CA."""

from __future__ import annotations

from aiohttp import web

from undoproxy import redact
from undoproxy.admin.api import session_or_404
from undoproxy.proxy.tls_failures import TlsFailures

TLS_FAILURES: web.AppKey[TlsFailures] = web.AppKey("tls_failures", TlsFailures)


async def tls_failures(request: web.Request) -> web.Response:
    """The session's failed client handshakes (at most the last 20), oldest first."""
    session = await session_or_404(request)
    failures = request.app[TLS_FAILURES].of(session.id)
    return web.json_response(
        {
            "session": session.id,
            "failures": [{**f.to_json(), "error": redact.text(f.error)} for f in failures],
        }
    )


ROUTES: list[web.AbstractRouteDef] = [web.get("/api/sessions/{id}/tls-failures", tls_failures)]
