"""The credential broker in the admin API: what `env` and `doctor` need, never a value.

GET  /api/secrets                      each entry: name, kind, hosts, header, sessions,
                                       where its values come from, its placeholders, uses
GET  /api/secrets/placeholders?session=ID   the variables `undoproxy env` prints for ID
POST /api/secrets/reload               read every value again (also on SIGHUP)
POST /api/secrets/check {salt, digests}    which of an agent's variables hold a real
                                       value: `doctor` sends HMAC-SHA256(salt, value) of
                                       each, never the value itself
"""

from __future__ import annotations

import logging
from typing import Any, Final

from aiohttp import web

from undoproxy.admin.errors import ApiError, json_body
from undoproxy.admin.metrics_api import METRICS
from undoproxy.broker.broker import USERS, Broker

log = logging.getLogger(__name__)
BROKER: web.AppKey[Broker] = web.AppKey("broker", Broker)
MAX_CHECKED: Final = 4096  # variables one check may ask about (an environment, with room)
DEFAULT_SESSION: Final = "default"  # what a request with no session belongs to


def reload_and_say(broker: Broker) -> list[str]:
    """Reload the secrets, and log what happened (on SIGHUP nobody else would say)."""
    errors = broker.reload()
    if errors:
        log.error("secrets not reloaded (the values in use stay): %s", "; ".join(errors))
    else:
        log.warning("secrets reloaded: %d entries", len(broker.entries))
    return errors


async def list_secrets(request: web.Request) -> web.Response:
    """Every entry, without its values."""
    broker = request.app[BROKER]
    return web.json_response({"secrets": broker.describe(), "loaded_at": broker.loaded_at})


async def placeholders(request: web.Request) -> web.Response:
    """The (variable, placeholder) pairs an agent of `?session=` is given."""
    session = request.query.get("session") or DEFAULT_SESSION
    variables = request.app[BROKER].variables(session)
    return web.json_response({"session": session, "variables": dict(variables)})


async def reload(request: web.Request) -> web.Response:
    """Read every value again; 409 with the reasons when one cannot be read (none changed)."""
    broker = request.app[BROKER]
    errors = reload_and_say(broker)
    if errors:
        raise ApiError(
            409,
            "secrets_unreadable",
            "not reloaded, the values in use stay: " + "; ".join(errors),
        )
    return web.json_response({"reloaded": len(broker.entries), "loaded_at": broker.loaded_at})


async def check(request: web.Request) -> web.Response:
    """Which variables hold a real value, from their HMAC digests under the caller's salt."""
    body = await json_body(request)
    salt, digests = body.get("salt"), body.get("digests")
    if not isinstance(salt, str) or len(salt) < 32:
        raise ApiError(400, "bad_request", "salt must be at least 32 hex characters")
    try:
        raw_salt = bytes.fromhex(salt)
    except ValueError:
        raise ApiError(400, "bad_request", "salt must be hex") from None
    if not isinstance(digests, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in digests.items()
    ):
        raise ApiError(400, "bad_request", "digests must map variable names to hex digests")
    if len(digests) > MAX_CHECKED:
        raise ApiError(413, "too_large", f"at most {MAX_CHECKED} variables per check")
    found = request.app[BROKER].holders(raw_salt, digests)
    out: list[dict[str, Any]] = [{"variable": f.where, "secret": f.secret} for f in found]
    return web.json_response({"found": out})


def setup(app: web.Application, broker: Broker) -> None:
    """Serve `broker` on `app`, and count its uses in the app's metrics."""
    app[BROKER] = broker
    metrics = app[METRICS]
    metrics.secrets_known([e.name for e in broker.entries], USERS)
    stop = broker.on_use(metrics.secret_used)

    async def _stop(_: web.Application) -> None:
        stop()

    app.on_cleanup.append(_stop)


ROUTES: list[web.AbstractRouteDef] = [
    web.get("/api/secrets", list_secrets),
    web.get("/api/secrets/placeholders", placeholders),
    web.post("/api/secrets/reload", reload),
    web.post("/api/secrets/check", check),
]
