"""Which session a request belongs to, and stripping what identified it before forwarding.

Order: the session's own port (a per-session listener, see undoproxy/runtimes/listeners.py:
every connection to it belongs to that session, whatever it sends), then proxy-URL
credentials (on the CONNECT of a tunnel, remembered for every request inside it; or on each
plain-HTTP request), then the `X-Undoproxy-Session` header, then `default`.
In `token` auth mode, credentials naming an existing session with its token are required,
else the proxy answers 407 and forwards nothing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Callable

from mitmproxy import connection, http

from undoproxy import redact
from undoproxy.methods import is_mutation
from undoproxy.proxy import answers
from undoproxy.proxy.state import KEY, FlowState
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)
SESSION_HEADER = "X-Undoproxy-Session"
INTENT_HEADER = "X-Undoproxy-Intent"  # why the agent makes this call: kept with the step
MAX_INTENT = 2000
_STRIP = ("Proxy-Authorization", "Proxy-Connection", SESSION_HEADER, INTENT_HEADER)
_MAX_ID = 128


class Malformed(ValueError):
    """A Proxy-Authorization header that is present but unreadable."""


def parse_basic(value: str | None) -> tuple[str, str] | None:
    """(user, password) from a `Basic` Proxy-Authorization value; None when there is none.

    Raises Malformed for anything else: another scheme, bad base64, not UTF-8, no colon.
    """
    if value is None:
        return None
    scheme, _, encoded = value.strip().partition(" ")
    if scheme.lower() != "basic":
        raise Malformed("proxy credentials must use the Basic scheme")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise Malformed("unreadable proxy credentials (Basic: base64 of UTF-8 id:token)") from None
    user, colon, password = decoded.partition(":")
    if not colon:
        raise Malformed("proxy credentials must be SESSION:TOKEN")
    return user, password


def _valid_id(session_id: str) -> bool:
    return 0 < len(session_id) <= _MAX_ID and session_id.isprintable() and "/" not in session_id


class SessionIdentity:
    """Attributes every flow to a session; answers 407 in token mode when that fails."""

    def __init__(
        self,
        journal: Journal,
        auth: str,
        session_for_port: Callable[[int], str | None] | None = None,
    ) -> None:
        self.journal = journal
        self.auth = auth
        self.session_for_port = session_for_port or (lambda port: None)
        self._tunnels: dict[str, str] = {}  # client connection id -> session id

    def _port_session(self, client: connection.Client) -> str | None:
        """The session of the per-session port this client connected to, if it did."""
        sockname = client.sockname
        return self.session_for_port(sockname[1]) if sockname else None

    def _check(self, header: str | None) -> tuple[str | None, str]:
        """(session id, "") when accepted, else (None, why)."""
        try:
            creds = parse_basic(header)
        except Malformed as exc:
            return None, str(exc)
        if creds is None:
            if self.auth == "token":
                return None, "proxy credentials required: use http://SESSION:TOKEN@host:port"
            return "default", ""
        session_id, token = creds
        if not _valid_id(session_id):
            return None, "invalid session id in the proxy credentials"
        if self.auth == "token":
            session = self.journal.sessions.get(session_id)
            # Bytes: compare_digest refuses str with non-ASCII characters.
            if session is None or not hmac.compare_digest(
                session.token.encode(), token.encode("utf-8", "surrogatepass")
            ):
                return None, f"unknown session or wrong token for session {session_id!r}"
        return session_id, ""

    def http_connect(self, flow: http.HTTPFlow) -> None:
        """Remember the tunnel's session (or refuse the tunnel with 407)."""
        own = self._port_session(flow.client_conn)
        if own is not None:
            self._tunnels[flow.client_conn.id] = own
            return
        header = flow.request.headers.get("Proxy-Authorization")
        if header is None and self.auth != "token":
            return  # requests inside may still name a session by header
        session_id, why = self._check(header)
        if session_id is None:
            flow.response = answers.proxy_auth_required(why)
            return
        self._tunnels[flow.client_conn.id] = session_id

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Attribute the request to its session and strip the identifying headers."""
        if flow.response is not None:
            return
        headers = flow.request.headers
        session_id = self._tunnels.get(flow.client_conn.id) or self._port_session(flow.client_conn)
        if session_id is None:
            plain = headers.get("Proxy-Authorization")
            named = headers.get(SESSION_HEADER, "").strip()
            if plain is not None or self.auth == "token":
                session_id, why = self._check(plain)
                if session_id is None:
                    flow.response = answers.proxy_auth_required(why)
                    flow.metadata[KEY] = FlowState("default", False, answered=True, journaled=False)
                    _strip(headers)
                    return
            elif named and _valid_id(named):
                session_id = named
            else:
                session_id = "default"
        # Free text from the agent: kept (and shown) with any secret in it hidden.
        intent = redact.text(headers.get(INTENT_HEADER, "").strip()[:MAX_INTENT]) or None
        _strip(headers)
        if session_id not in self.journal.sessions:
            self.journal.ensure_session(session_id)
        flow.metadata[KEY] = FlowState(session_id, is_mutation(flow.request.method), intent=intent)

    def session_of(self, client: connection.Client) -> str | None:
        """The session of a client's tunnel (or session port), when it named one."""
        return self._tunnels.get(client.id) or self._port_session(client)

    def client_disconnected(self, client: connection.Client) -> None:
        """Forget a closed tunnel."""
        self._tunnels.pop(client.id, None)


_STRIP_RAW = frozenset(name.lower().encode() for name in _STRIP)


def _strip(headers: http.Headers) -> None:
    # One pass over the raw fields: this runs for every request an agent makes.
    fields = headers.fields
    if any(name.lower() in _STRIP_RAW for name, _ in fields):
        headers.fields = tuple(f for f in fields if f[0].lower() not in _STRIP_RAW)
