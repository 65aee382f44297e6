"""Per-session proxy ports, for clients that cannot send proxy credentials.

A JVM sends proxy credentials only after a 407 challenge, and then only through an
`Authenticator` set in code (and never Basic for HTTPS tunnels since JDK 8u111); many other
tools are configured with a proxy host and port only. For them `undoproxy env --session ID`
asks for the session's own port: a second listener of the same mitmproxy, with the same
addons behind the same fail-closed guard, where every connection belongs to that session
(`SessionIdentity` asks `session_for(port)` before looking at credentials).

The port is handed out only through the admin API (admin token), listens on the proxy's own
address, and is kept in `<state_dir>/session-ports.json` so that it stays the same across
restarts (reopened on start, when it is still free). In `auth: open` mode the port is the
session's credential; in `auth: token` mode it is not (any local process can connect to it):
requests on it need that session's proxy credentials, as on the main port. In every mode a
request on it that names another session is refused (see proxy/identity.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from mitmproxy.proxy import mode_specs

from undoproxy.admin.context import CONTEXT
from undoproxy.admin.errors import ApiError
from undoproxy.credentials import write_private

log = logging.getLogger(__name__)
PORTS_FILE = "session-ports.json"
MAX_LISTENERS = 256


class ListenerError(Exception):
    """A session port could not be opened (raised by SessionListeners.open)."""


class SessionListeners:
    """Opens and remembers one extra proxy listener per session that asks for one."""

    def __init__(
        self,
        proxyserver: Any,
        host: str,
        state_dir: Path,
        base_modes: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.proxyserver = proxyserver  # mitmproxy's Proxyserver addon
        self.host = host
        # The main listener's modes (mitmproxy's `mode` option), kept when ports are added.
        self.base_modes = base_modes or _mitmproxy_modes
        self.path = state_dir / PORTS_FILE
        self._ports: dict[int, str] = {}  # port -> session id
        self._lock = asyncio.Lock()

    def session_for(self, port: int) -> str | None:
        """The session whose own port `port` is, if any."""
        return self._ports.get(port)

    def port_of(self, session_id: str) -> int | None:
        """The session's own port, if it has one."""
        return next((p for p, s in self._ports.items() if s == session_id), None)

    async def restore(self) -> None:
        """Reopen the ports handed out before the last restart (those still free)."""
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        for session_id, port in saved.items():
            if isinstance(port, int) and isinstance(session_id, str):
                self._ports[port] = session_id
        if self._ports and not await self._apply():
            log.warning("some session ports could not be reopened; `undoproxy env` makes new ones")
            self._ports = {p: s for p, s in self._ports.items() if self._listening(p)}
            self._save()

    async def open(self, session_id: str, closed: Callable[[str], bool] | None = None) -> int:
        """The session's port, opening one when it has none; raises ListenerError.

        At MAX_LISTENERS, the ports of sessions for which `closed` is true are given up first.
        """
        async with self._lock:
            port = self.port_of(session_id)
            if port is not None and self._listening(port):
                return port
            if len(self._ports) >= MAX_LISTENERS and closed is not None:
                self._ports = {p: s for p, s in self._ports.items() if not closed(s)}
            if len(self._ports) >= MAX_LISTENERS:
                raise ListenerError(f"too many session ports ({MAX_LISTENERS})")
            port = _free_port(self.host)
            self._ports = {p: s for p, s in self._ports.items() if s != session_id}
            self._ports[port] = session_id
            if not await self._apply():
                del self._ports[port]
                raise ListenerError(f"could not listen on {self.host}:{port}")
            self._save()
            return port

    def _mode(self, port: int) -> mode_specs.ProxyMode:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return mode_specs.ProxyMode.parse(f"regular@{host}:{port}")

    def _listening(self, port: int) -> bool:
        with contextlib.suppress(KeyError):
            return bool(self.proxyserver.servers[self._mode(port)].is_running)
        return False

    async def _apply(self) -> bool:
        modes = [mode_specs.ProxyMode.parse(m) for m in self.base_modes()]
        modes += [self._mode(p) for p in sorted(self._ports)]
        ok: bool = await self.proxyserver.servers.update(modes)
        return ok and all(self._listening(p) for p in self._ports)

    def _save(self) -> None:
        data = {s: p for p, s in sorted(self._ports.items())}
        tmp = self.path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        write_private(tmp, json.dumps(data, indent=2).encode())
        tmp.replace(self.path)


def _mitmproxy_modes() -> Sequence[str]:
    from mitmproxy import ctx

    return list(ctx.options.mode)


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


LISTENERS: web.AppKey[SessionListeners] = web.AppKey("session_listeners", SessionListeners)


async def open_listener(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/listener: the session's own proxy port (opened if needed)."""
    ctx = request.app[CONTEXT]
    session_id = request.match_info["id"]
    if await ctx.journal.find_session(session_id) is None:
        raise ApiError(404, "not_found", f"no session {session_id!r}")
    listeners = request.app[LISTENERS]

    def closed(sid: str) -> bool:
        session = ctx.journal.sessions.get(sid)
        return session is None or session.state in ("committed", "rolled_back")

    try:
        port = await listeners.open(session_id, closed)
    except ListenerError as exc:
        raise ApiError(503, "unavailable", str(exc)) from None
    host = ctx.proxy_address[0]
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return web.json_response(
        {"session": session_id, "host": host, "port": port, "proxy_url": f"http://{host}:{port}"}
    )


ROUTES: list[web.AbstractRouteDef] = [web.post("/api/sessions/{id}/listener", open_listener)]
