"""The failed client handshakes kept per session for `doctor` (proxy/tls_failures.py): bounded
per session and in sessions, and served by GET /api/sessions/{id}/tls-failures."""

from __future__ import annotations

import pytest
import requests

from tests.support.proc import Undoproxy
from undoproxy.proxy.tls_failures import PER_SESSION, SESSIONS, TlsFailure, TlsFailures


def _failure(n: int) -> TlsFailure:
    return TlsFailure(f"10.0.0.1:{n}", float(n), "tlsv1 alert unknown ca", True)


@pytest.mark.parametrize("added", [PER_SESSION, PER_SESSION + 1])
def test_a_session_keeps_its_newest_failures_up_to_the_limit(added: int) -> None:
    kept = TlsFailures(lambda client: None)
    for n in range(added):
        kept.add("s", _failure(n))
    assert [f.at for f in kept.of("s")] == [float(n) for n in range(added - PER_SESSION, added)]


@pytest.mark.parametrize("sessions", [SESSIONS, SESSIONS + 1])
def test_the_least_recently_failing_session_goes_first_past_the_limit(sessions: int) -> None:
    kept = TlsFailures(lambda client: None)
    for n in range(sessions):
        kept.add(f"s{n}", _failure(n))
    assert bool(kept.of("s0")) is (sessions == SESSIONS)
    assert kept.of(f"s{sessions - 1}")


def test_the_api_needs_the_token_and_a_known_session(proxy: Undoproxy, session_id: str) -> None:
    path = f"/api/sessions/{session_id}/tls-failures"
    assert proxy.api("GET", path).status_code == 404
    proxy.api("POST", "/api/sessions", json={"id": session_id})
    assert proxy.api("GET", path).json() == {"session": session_id, "failures": []}
    assert requests.get(proxy.admin_url + path, timeout=10).status_code == 401
