"""Every state-changing admin call must come from the admin's own origin, or from no browser.

A browser names where a request comes from (`Origin`, and `Sec-Fetch-Site` in current
browsers); a CLI or script sends neither. So a POST, PUT, PATCH or DELETE is refused 403 when:
- `Sec-Fetch-Site` says anything but `same-origin` (`same-site` is what another port of the
  same host gets: sites ignore ports, origins do not);
- `Origin` is not `http(s)://<Host>` of this very request (another port, another host, `null`);
- `Origin` is present and `Host` is a name undoproxy is not known by: a page whose DNS name
  was rebound to 127.0.0.1 has a matching Origin and Host, but not one of these names.

Known names: IP literals, `localhost`, the host `admin.listen` names, and this machine's
hostname. Requests with neither header (the CLI) are left to the bearer token.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from functools import cache

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import Handler, error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@cache
def _machine_names() -> frozenset[str]:
    # gethostname only: a DNS lookup (getfqdn) would block the event loop.
    return frozenset({socket.gethostname().lower()})


def _hostname(host: str) -> str:
    """`example:8081` -> `example`; `[::1]:8081` -> `::1`."""
    if host.startswith("["):
        return host[1 : host.find("]")].lower() if "]" in host else host.lower()
    return host.rpartition(":")[0].lower() if host.count(":") == 1 else host.lower()


def known_host(host: str, listen_host: str) -> bool:
    """True when `host` (a Host header value) is a name this admin listens under."""
    name = _hostname(host).rstrip(".")
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost") or name == listen_host.lower():
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name in _machine_names()
    return True


def refusal(method: str, headers: Mapping[str, str], host: str, listen_host: str) -> str | None:
    """Why a request may not change anything (None: it may)."""
    if method in SAFE_METHODS:
        return None
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site != "same-origin":
        return f"a {site} page may not change anything here (Sec-Fetch-Site: {site})"
    origin = headers.get("Origin")
    if origin is None:
        return None
    if origin not in (f"http://{host}", f"https://{host}"):
        return f"requests from {origin} may not change anything here"
    if not known_host(host, listen_host):
        return f"this admin is not served under the name {_hostname(host)!r}"
    return None


@web.middleware
async def same_origin_changes(request: web.Request, handler: Handler) -> web.StreamResponse:
    """403 for a state-changing request another origin's page made."""
    listen_host = request.app[CONTEXT].config.admin_listen[0]
    why = refusal(request.method, request.headers, request.host, listen_host)
    if why is not None:
        return error_response(403, "cross_origin", why)
    return await handler(request)
