"""Which session a request belongs to, and stripping what identified it before forwarding.

Order: the session's own port (a per-session listener, see undoproxy/runtimes/listeners.py:
every connection to it belongs to that session), then proxy-URL credentials (on the CONNECT
of a tunnel, remembered for every request inside it; or on each plain-HTTP request), then the
`X-Undoproxy-Session` header, then `default`.
In `token` auth mode, credentials naming an existing session with its token are required,
else the proxy answers 407 and forwards nothing; on a session's own port too (there they must
be that session's): in token mode a port is not a credential, since any local process can
connect to it.
On a session's own port, a request whose credentials or `X-Undoproxy-Session` name another
session is refused (403 `undoproxy_wrong_session`) in every mode: filed under the port's
session it would escape that other session's kill switch and budget.
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
from undoproxy.proxy.fieldcheck import bad_field, bad_method, bad_target
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

    async def _check(self, header: str | None) -> tuple[str | None, str]:
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
            # In memory when open; a closed one (reads still pass) is read from the journal.
            session = self.journal.sessions.get(session_id) or await self.journal.find_session(
                session_id
            )
            # Bytes: compare_digest refuses str with non-ASCII characters.
            if session is None or not hmac.compare_digest(
                session.token.encode(), token.encode("utf-8", "surrogatepass")
            ):
                return None, f"unknown session or wrong token for session {session_id!r}"
        return session_id, ""

    async def _refusal_on_port(
        self, own: str, credentials: str | None, named: str | None, *, in_tunnel: bool = False
    ) -> http.Response | None:
        """Why a request on session `own`'s port is refused (its answer), or None.

        `credentials` is its Proxy-Authorization, `named` its X-Undoproxy-Session; `in_tunnel`:
        it came inside a tunnel whose CONNECT passed, so only `named` is left to check."""
        if in_tunnel:
            credentials = None
        try:
            creds = parse_basic(credentials)
        except Malformed as exc:
            return answers.proxy_auth_required(str(exc))
        if creds is not None and creds[0] != own:
            return answers.wrong_session(own, creds[0])
        if named is not None and named.strip() and named.strip() != own:
            return answers.wrong_session(own, named.strip())
        if self.auth == "token" and not in_tunnel:
            if creds is None:
                return answers.proxy_auth_required(
                    f"proxy credentials of session {own!r} required on its own port "
                    "(auth: token): use http://SESSION:TOKEN@host:port"
                )
            session_id, why = await self._check(credentials)
            if session_id is None:
                return answers.proxy_auth_required(why)
        return None

    def session_of(self, client: connection.Client) -> str:
        """The session a connection's traffic belongs to as far as the connection tells (its
        port, its tunnel's credentials), else `default`."""
        return self._tunnels.get(client.id) or self._port_session(client) or "default"

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        """Remember the tunnel's session (or refuse the tunnel with 407, or 403 on a session's
        own port when it names another session, or 400 when its head is malformed)."""
        why = malformed_head(flow.request)
        if why is not None:
            flow.response = answers.bad_request(why)
            return
        own = self._port_session(flow.client_conn)
        if own is not None:
            headers = flow.request.headers
            refusal = await self._refusal_on_port(
                own, headers.get("Proxy-Authorization"), headers.get(SESSION_HEADER)
            )
            if refusal is not None:
                flow.response = refusal
                return
            self._tunnels[flow.client_conn.id] = own
            return
        header = flow.request.headers.get("Proxy-Authorization")
        if header is None and self.auth != "token":
            return  # requests inside may still name a session by header
        session_id, why = await self._check(header)
        if session_id is None:
            flow.response = answers.proxy_auth_required(why)
            return
        self._tunnels[flow.client_conn.id] = session_id

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Attribute the request to its session and strip the identifying headers."""
        if flow.response is not None:
            return
        why = malformed_head(flow.request)
        if why is not None:  # before anything reads a header: none of it can be trusted
            self._refuse(flow, answers.bad_request(why))
            return
        headers = flow.request.headers
        session_id = self._tunnels.get(flow.client_conn.id)
        own = self._port_session(flow.client_conn)
        if own is not None:
            # Inside a tunnel its CONNECT was checked; each request may still name a session.
            refusal = await self._refusal_on_port(
                own,
                headers.get("Proxy-Authorization"),
                headers.get(SESSION_HEADER),
                in_tunnel=session_id is not None,
            )
            if refusal is not None:
                self._refuse(flow, refusal)
                return
            session_id = own
        if session_id is None:
            plain = headers.get("Proxy-Authorization")
            named = headers.get(SESSION_HEADER, "").strip()
            if plain is not None or self.auth == "token":
                session_id, why = await self._check(plain)
                if session_id is None:
                    self._refuse(flow, answers.proxy_auth_required(why))
                    return
            elif named and _valid_id(named):
                session_id = named
            else:
                session_id = "default"
        # Free text from the agent: kept (and shown) with any secret in it hidden.
        intent = redact.text(headers.get(INTENT_HEADER, "").strip()[:MAX_INTENT]) or None
        _strip(headers)
        if session_id not in self.journal.sessions:
            # Closed sessions are not kept in memory: read it back (its state decides what a
            # mutation gets), or create it on first use.
            await self.journal.admit(session_id)
        flow.metadata[KEY] = FlowState(session_id, is_mutation(flow.request.method), intent=intent)

    def request(self, flow: http.HTTPFlow) -> None:
        """Refuse a request whose trailers (read with its body) are malformed (400)."""
        trailers = flow.request.trailers
        if flow.response is None and trailers:
            why = bad_field(trailers.fields, "trailer")
            if why is not None:
                state = flow.metadata.get(KEY)
                if isinstance(state, FlowState):
                    state.answered = True  # journaled as answered by undoproxy, not forwarded
                flow.response = answers.bad_request(why)

    @staticmethod
    def _refuse(flow: http.HTTPFlow, answer: http.Response) -> None:
        """Answer the request with `answer`: not journaled, filed under no session."""
        flow.response = answer
        flow.metadata[KEY] = FlowState("default", False, answered=True, journaled=False)
        _strip(flow.request.headers)

    def client_disconnected(self, client: connection.Client) -> None:
        """Forget a closed tunnel."""
        self._tunnels.pop(client.id, None)


def malformed_head(request: http.Request) -> str | None:
    """Why a request's head cannot be forwarded as read (proxy/fieldcheck.py), or None."""
    data = request.data
    return (
        bad_field(request.headers.fields)
        or bad_target(data.path)
        or bad_target(data.authority)
        or bad_method(data.method)
    )


_STRIP_RAW = frozenset(name.lower().encode() for name in _STRIP)


def _strip(headers: http.Headers) -> None:
    # One pass over the raw fields: this runs for every request an agent makes.
    fields = headers.fields
    if any(name.lower() in _STRIP_RAW for name, _ in fields):
        headers.fields = tuple(f for f in fields if f[0].lower() not in _STRIP_RAW)
