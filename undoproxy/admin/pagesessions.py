"""Signed-in admin page users: a random key in an HttpOnly, SameSite=Strict cookie maps to the
name given at sign-in (who decides) and a CSRF token, server-side. The admin token itself is
never put in a cookie. State-changing calls must echo the CSRF token (header or form field).
Sessions live in memory: a restart signs everyone out.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field

from aiohttp import web

COOKIE = "undoproxy_page"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"
IDLE_SECONDS = 12 * 3600
MAX_SESSIONS = 1000
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class PageSession:
    """One signed-in browser."""

    key: str
    name: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
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
        session = PageSession(secrets.token_urlsafe(32), name)
        self._by_key[session.key] = session
        return session

    def get(self, key: str | None) -> PageSession | None:
        """The live session with this cookie value, if any."""
        session = self._by_key.get(key) if key else None
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


def page_session(request: web.Request) -> PageSession | None:
    """The signed-in page user making this request, if any."""
    sessions = request.app.get(PAGE_SESSIONS)
    return sessions.get(request.cookies.get(COOKIE)) if sessions is not None else None


def csrf_ok(given: str | None, session: PageSession) -> bool:
    """True when `given` is this session's CSRF token."""
    return bool(given) and hmac.compare_digest(str(given).encode(), session.csrf.encode())


def set_cookie(response: web.StreamResponse, session: PageSession) -> None:
    """The sign-in cookie: HttpOnly, SameSite=Strict, whole site."""
    response.set_cookie(
        COOKIE, session.key, httponly=True, samesite="Strict", path="/", max_age=IDLE_SECONDS
    )


def clear_cookie(response: web.StreamResponse) -> None:
    """Forget the sign-in cookie."""
    response.del_cookie(COOKIE, path="/")
