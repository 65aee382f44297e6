"""Which browser requests may change state: the same-origin rule as a table."""

from __future__ import annotations

import socket

import pytest

from undoproxy.admin.origin import known_host, refusal

HOST = "127.0.0.1:8081"


@pytest.mark.parametrize(
    ("method", "headers", "host", "refused"),
    [
        ("POST", {}, HOST, False),  # the CLI: no Origin, judged by its token
        ("POST", {"Origin": f"http://{HOST}"}, HOST, False),
        ("POST", {"Origin": f"http://{HOST}", "Sec-Fetch-Site": "same-origin"}, HOST, False),
        ("DELETE", {"Origin": "http://[::1]:8081"}, "[::1]:8081", False),
        ("POST", {"Origin": "http://localhost:8081"}, "localhost:8081", False),
        ("GET", {"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"}, HOST, False),
        ("POST", {"Origin": "http://127.0.0.1:3000"}, HOST, True),  # another port
        ("PUT", {"Origin": "http://localhost:8081"}, HOST, True),  # another name
        ("PATCH", {"Origin": "null"}, HOST, True),
        ("POST", {"Origin": f"http://{HOST}.evil"}, HOST, True),
        ("POST", {"Sec-Fetch-Site": "same-site"}, HOST, True),
        ("POST", {"Sec-Fetch-Site": "cross-site"}, HOST, True),
        ("POST", {"Sec-Fetch-Site": "none"}, HOST, True),
        ("POST", {"Origin": "http://rebound.test:8081"}, "rebound.test:8081", True),
    ],
)
def test_refusal(method: str, headers: dict[str, str], host: str, refused: bool) -> None:
    assert (refusal(method, headers, host, "127.0.0.1") is not None) is refused


@pytest.mark.parametrize(
    ("host", "listen", "known"),
    [
        ("127.0.0.1:8081", "127.0.0.1", True),
        ("10.1.2.3:8081", "0.0.0.0", True),
        ("[::1]:8081", "::1", True),
        ("localhost", "127.0.0.1", True),
        ("app.localhost:8081", "127.0.0.1", True),
        ("undoproxy.internal:8081", "undoproxy.internal", True),
        ("UNDOPROXY.internal.:8081", "undoproxy.internal", True),
        (f"{socket.gethostname()}:8081", "0.0.0.0", True),
        ("evil.example:8081", "0.0.0.0", False),
        ("", "127.0.0.1", False),
    ],
)
def test_known_host(host: str, listen: str, known: bool) -> None:
    assert known_host(host, listen) is known
