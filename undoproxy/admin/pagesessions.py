"""Signed-in admin page users: a random page key maps, server-side, to the name given at sign-in
(who decides).

The page keeps its key in `sessionStorage` and sends it as `Authorization: Bearer <key>` on
every call. Nothing the browser attaches by itself carries it: no cookie (cookies are not
scoped by port, so a dev server on another port of 127.0.0.1 would receive one), no URL. A
page served from any other origin, other ports of the same host included, can neither read
the key (storage is per scheme + host + port) nor make the browser send it; and since it is
never attached automatically, no CSRF token is needed. The admin token itself is used once,
to sign in, and never stored by the page. Keys live in memory: a restart signs everyone out.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field

from aiohttp import web

KEY_PREFIX = "page_"
IDLE_SECONDS = 12 * 3600
MAX_SESSIONS = 1000


@dataclass
class PageSession:
    """One signed-in browser tab."""

    key: str
    name: str
    last_seen: float = field(default_factory=time.monotonic)


class PageSessions:
    """The signed-in browsers of this undoproxy."""

    def __init__(self) -> None:
        self._by_key: dict[str, PageSession] = {}

    def create(self, name: str) -> PageSession:
        """Sign a browser in under `name`."""
        if len(self._by_key) >= MAX_SESSIONS:  # drop the least recently seen
            oldest = min(self._by_key.values(), key=lambda s: s.last_seen)
            del self._by_key[oldest.key]
        session = PageSession(KEY_PREFIX + secrets.token_urlsafe(32), name)
        self._by_key[session.key] = session
        return session

    def get(self, key: str | None) -> PageSession | None:
        """The live session with this page key, if any."""
        if not key or not key.startswith(KEY_PREFIX):
            return None
        session = self._by_key.get(key)  # hashed whole first: no timing leak of a prefix
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > IDLE_SECONDS:
            del self._by_key[session.key]
            return None
        session.last_seen = now
        return session

    def drop(self, key: str | None) -> None:
        """Sign a browser out."""
        if key:
            self._by_key.pop(key, None)


PAGE_SESSIONS: web.AppKey[PageSessions] = web.AppKey("page_sessions", PageSessions)


def bearer(request: web.Request) -> str | None:
    """The value of `Authorization: Bearer <value>`, if the request has one."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return given.strip() or None if scheme.lower() == "bearer" else None


def bearer_is(request: web.Request, secret: str) -> bool:
    """True when the request's bearer value is `secret` (compared in constant time)."""
    given = bearer(request)
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


def page_session(request: web.Request) -> PageSession | None:
    """The signed-in page user making this request, if any."""
    sessions = request.app.get(PAGE_SESSIONS)
    return sessions.get(bearer(request)) if sessions is not None else None
