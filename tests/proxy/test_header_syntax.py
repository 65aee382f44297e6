"""CR, LF or NUL where no line may break is refused, never forwarded (a real `undoproxy run`).

Raw sockets, since no well-behaved client sends these: HTTP/1 in plain and inside a TLS tunnel,
HTTP/2 inside a TLS tunnel (h2, with its own checks off). Each request carries a marker; the
upstream must never see it, and the agent gets `400 undoproxy_bad_request`.
"""

from __future__ import annotations

import json
import socket
import ssl
import uuid

import h2.config
import h2.connection
import h2.events
import pytest

from tests.conftest import received
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.proxy.fieldcheck import bad_field, bad_method, bad_target

# (name, value) pairs no request may carry; `{m}` is the test's marker.
BAD_HEADERS = {
    "bare-cr-in-value": (b"X-Note", b"a\rInjected: {m}"),
    "nul-in-value": (b"X-Note", b"a\x00{m}"),
    "obs-fold": (b"X-Note", b"a\r\n Injected-{m}"),  # HTTP/1 joins it as CRLF SP
    "space-in-name": (b"X Note{m}", b"a"),
    "cr-in-name": (b"X\rNote{m}", b"a"),
}


def _recv_head(sock: socket.socket | ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _answer(sock: socket.socket | ssl.SSLSocket) -> tuple[int, bytes]:
    """Status and body of an HTTP/1 answer with a Content-Length."""
    head = _recv_head(sock)
    header, _, body = head.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1])
    length = next(
        (int(line.split(b":", 1)[1]) for line in header.split(b"\r\n")[1:]
         if line.lower().startswith(b"content-length:")),
        0,
    )  # fmt: skip
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body


def _raw_request(target: bytes, host: bytes, name: bytes, value: bytes) -> bytes:
    return (
        b"POST " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n"
        + name + b": " + value + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    )  # fmt: skip


def _tunnel(proxy: Undoproxy, host: str, port: int, alpn: list[str]) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=15)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    assert b" 200 " in _recv_head(sock).split(b"\r\n", 1)[0]
    ctx = ssl.create_default_context(cafile=proxy.ca_bundle)
    ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(sock, server_hostname=host)


def _h2_exchange(
    proxy: Undoproxy,
    server: ThreadedServer,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    trailers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[int | None, bytes]:
    """One HTTP/2 request (h2's own checks off) inside a TLS tunnel: its status and body."""
    config = h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
    )
    with _tunnel(proxy, "localhost", server.port, ["h2"]) as tls:
        assert tls.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection(config=config)
        conn.initiate_connection()
        last = not body and trailers is None
        conn.send_headers(1, headers, end_stream=last)
        if body:
            conn.send_data(1, body, end_stream=trailers is None)
        if trailers is not None:
            conn.send_headers(1, trailers, end_stream=True)
        tls.sendall(conn.data_to_send())
        status, answer, done = None, b"", False
        while not done:
            data = tls.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    answer += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
                elif isinstance(
                    event,
                    (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated),
                ):
                    done = True
            tls.sendall(conn.data_to_send())
    return status, answer


@pytest.fixture
def marker() -> str:
    return uuid.uuid4().hex


def _never_forwarded(*servers: ThreadedServer, marker: str) -> None:
    for server in servers:
        seen = [r for r in received(server) if marker in repr(r)]
        assert seen == [], seen


@pytest.mark.parametrize("case", list(BAD_HEADERS))
def test_plain_http1_is_refused(
    proxy: Undoproxy, plain_upstream: ThreadedServer, case: str, marker: str
) -> None:
    name, value = (part.replace(b"{m}", marker.encode()) for part in BAD_HEADERS[case])
    host = f"127.0.0.1:{plain_upstream.port}".encode()
    with socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=15) as sock:
        target = b"http://" + host + b"/echo/" + marker.encode()
        sock.sendall(_raw_request(target, host, name, value))
        status, body = _answer(sock)
    assert status == 400, body
    if "name" not in case:  # a bad name: mitmproxy's own check answers first (an HTML 400)
        assert json.loads(body)["error"] == "undoproxy_bad_request"
    _never_forwarded(plain_upstream, marker=marker)


@pytest.mark.parametrize("case", ["bare-cr-in-value", "nul-in-value", "obs-fold"])
def test_http1_inside_a_tls_tunnel_is_refused(
    proxy: Undoproxy, tls_upstream: ThreadedServer, case: str, marker: str
) -> None:
    name, value = (part.replace(b"{m}", marker.encode()) for part in BAD_HEADERS[case])
    with _tunnel(proxy, "localhost", tls_upstream.port, ["http/1.1"]) as tls:
        host = f"localhost:{tls_upstream.port}".encode()
        tls.sendall(_raw_request(b"/echo/" + marker.encode(), host, name, value))
        status, body = _answer(tls)
    assert status == 400, body
    # undoproxy's answer, not the upstream's: an upstream that refuses it too never shows it
    assert json.loads(body)["error"] == "undoproxy_bad_request"
    _never_forwarded(tls_upstream, marker=marker)


@pytest.mark.parametrize(
    ("where", "name", "value"),
    [
        ("value-crlf", b"x-note", b"a\r\ninjected: {m}"),
        ("value-lf", b"x-note", b"a\ninjected: {m}"),
        ("value-nul", b"x-note", b"a\x00{m}"),
        ("name-crlf", b"x-note\r\ninjected-{m}", b"a"),
        ("path", b"x-note", b"a"),
    ],
)
def test_http2_inside_a_tls_tunnel_is_refused(
    proxy: Undoproxy,
    tls_upstream: ThreadedServer,
    where: str,
    name: bytes,
    value: bytes,
    marker: str,
) -> None:
    m = marker.encode()
    path = b"/echo/" + m + (b" HTTP/1.1\r\nX-Smuggled: 1" if where == "path" else b"")
    headers = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", f"localhost:{tls_upstream.port}".encode()),
        (b":path", path),
        (name.replace(b"{m}", m), value.replace(b"{m}", m)),
    ]
    status, body = _h2_exchange(proxy, tls_upstream, headers)
    assert status == 400, (status, body)
    if "name" not in where:
        assert json.loads(body)["error"] == "undoproxy_bad_request"
    _never_forwarded(tls_upstream, marker=marker)


def test_a_bad_trailer_is_refused(
    proxy: Undoproxy, tls_upstream: ThreadedServer, marker: str
) -> None:
    """HTTP/2 carries request trailers (mitmproxy's HTTP/1 reader does not take them at all:
    it drops such a connection, forwarding nothing)."""
    m = marker.encode()
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", f"localhost:{tls_upstream.port}".encode()),
        (b":path", b"/echo/" + m),
        (b"content-type", b"application/json"),
    ]
    status, body = _h2_exchange(
        proxy, tls_upstream, headers, b"{}", [(b"x-sum", b"a\r\ninjected: " + m)]
    )
    assert status == 400, (status, body)
    assert json.loads(body)["error"] == "undoproxy_bad_request"
    _never_forwarded(tls_upstream, marker=marker)


def test_a_well_formed_request_still_passes(
    proxy: Undoproxy, plain_upstream: ThreadedServer, marker: str
) -> None:
    host = f"127.0.0.1:{plain_upstream.port}".encode()
    with socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=15) as sock:
        target = b"http://" + host + b"/echo/" + marker.encode()
        sock.sendall(_raw_request(target, host, b"X-Note", b"tab\tand spaces, fine"))
        status, _ = _answer(sock)
    assert status == 200
    assert [r.headers.get("X-Note") for r in received(plain_upstream) if marker in r.path] == [
        "tab\tand spaces, fine"
    ]


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ([(b"Content-Type", b"application/json"), (b"X-A", b"\tb c\x7f\xff")], True),
        ([(b"X-A", b"a\rb")], False),
        ([(b"X-A", b"a\nb")], False),
        ([(b"X-A", b"a\x00b")], False),
        ([(b"X A", b"b")], False),
        ([(b"", b"b")], False),
        ([(b"X-A:", b"b")], False),
    ],
)
def test_bad_field(fields: list[tuple[bytes, bytes]], ok: bool) -> None:
    assert (bad_field(fields) is None) is ok


@pytest.mark.parametrize(
    ("target", "ok"),
    [(b"/a?b=c%20d", True), (b"/caf\xc3\xa9", True), (b"/a b", False), (b"/a\tb", False),
     (b"/a\x7f", False), (b"", True)],
)  # fmt: skip
def test_bad_target(target: bytes, ok: bool) -> None:
    assert (bad_target(target) is None) is ok


@pytest.mark.parametrize(("method", "ok"), [(b"GET", True), (b"M-SEARCH", True), (b"G T", False)])
def test_bad_method(method: bytes, ok: bool) -> None:
    assert (bad_method(method) is None) is ok
