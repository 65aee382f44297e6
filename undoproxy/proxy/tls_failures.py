"""Agents whose TLS handshake with undoproxy failed, per session: the evidence `doctor` reads
when it says a client does not trust undoproxy's CA.

A client that distrusts the certificate undoproxy makes for a host sends a TLS alert
(`unknown ca`, `bad certificate`, `certificate unknown`) inside its tunnel, and mitmproxy
calls `tls_failed_client`. Nothing of that request reaches the journal (there was no request),
so this addon keeps the last few failures of each session in memory, for
`GET /api/sessions/{id}/tls-failures`. It only observes: the handshake has failed already, so
nothing can be forwarded, and it runs outside FailClosed.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from mitmproxy import connection, tls

PER_SESSION = 20  # failures kept per session, the newest
SESSIONS = 1000  # sessions kept, the most recently failing
# What OpenSSL calls the alerts a client sends when it rejects the certificate it was shown.
DISTRUST_ALERTS = ("unknown ca", "bad certificate", "certificate unknown")


@dataclass(frozen=True)
class TlsFailure:
    """One client handshake that failed: where the agent was going, when, and why."""

    target: str  # host:port of the CONNECT (or the SNI when there was no address)
    at: float
    error: str  # what the TLS library reported (mitmproxy's words)
    distrust: bool  # the client said with an alert that it does not trust the certificate

    def to_json(self) -> dict[str, object]:
        """The failure as the admin API shows it."""
        return {
            "target": self.target,
            "at": self.at,
            "error": self.error,
            "distrust": self.distrust,
        }


class TlsFailures:
    """mitmproxy addon: records failed client handshakes by session (bounded)."""

    def __init__(self, session_of: Callable[[connection.Client], str | None]) -> None:
        self._session_of = session_of
        self._by_session: OrderedDict[str, deque[TlsFailure]] = OrderedDict()

    def tls_failed_client(self, data: tls.TlsData) -> None:
        """A client handshake failed: keep it under the client's session."""
        session = self._session_of(data.context.client) or "default"
        address = data.context.server.address
        target = f"{address[0]}:{address[1]}" if address else (data.conn.sni or "?")
        error = str(data.conn.error or "handshake failed")
        self.add(
            session,
            TlsFailure(target, time.time(), error, any(a in error for a in DISTRUST_ALERTS)),
        )

    def add(self, session: str, failure: TlsFailure) -> None:
        """Keep `failure`; the oldest of the session, and the least recent session, go first."""
        kept = self._by_session.pop(session, None) or deque(maxlen=PER_SESSION)
        kept.append(failure)
        self._by_session[session] = kept
        while len(self._by_session) > SESSIONS:
            self._by_session.popitem(last=False)

    def of(self, session: str) -> list[TlsFailure]:
        """The session's failures, oldest first."""
        return list(self._by_session.get(session, ()))
