"""No byte leaves unjudged: whatever is not HTTP is refused, never relayed as raw TCP.

mitmproxy relays a stream it does not recognise as HTTP as raw TCP (after `CONNECT`, a first
byte that is not a letter, plain or inside TLS; port 53 as DNS; after a 101 that is not a
WebSocket). Each case goes through a real `undoproxy run` from a raw socket to an upstream
that records every byte it receives: the marker must never reach it, the agent must get
`400 undoproxy_not_http`, and the journal must show the refusal.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.wire import RawUpstream, read_answer, read_head, tunnel
from tests.support.proc import Undoproxy


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("no-raw-tcp")).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def upstream(upstream_cert: tuple[Path, Path]) -> Iterator[RawUpstream]:
    server = RawUpstream(upstream_cert).start()
    yield server
    server.stop()


# What an agent sends through the tunnel; MARK is replaced by a unique marker.
NOT_HTTP = {
    "leading CRLF": b"\r\nDELETE /MARK HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\n\r\n",
    "leading LF": b"\nDELETE /MARK HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\n\r\n",
    "leading space": b" DELETE /MARK HTTP/1.1\r\nHost: HOST\r\n\r\n",
    "binary": b"\x00\x01\x02MARK\xff\xfe",
    "no space in the first line": b"DELETE/MARK\r\n\r\n",
    "SSH banner": b"SSH-2.0-OpenSSH_9.0 MARK\r\n",
}


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("name", list(NOT_HTTP))
def test_a_stream_that_is_not_http_is_refused_and_nothing_reaches_the_upstream(
    proxy: Undoproxy, upstream: RawUpstream, session_id: str, name: str, tls: bool
) -> None:
    marker = uuid.uuid4().hex.encode()
    target = f"127.0.0.1:{upstream.port}"
    data = NOT_HTTP[name].replace(b"MARK", marker).replace(b"HOST", target.encode())
    with tunnel(proxy.proxy_port, target, session=session_id, tls=tls, ca=proxy.ca_bundle) as s:
        s.sendall(data)
        answer = read_answer(s)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b'"undoproxy_not_http"' in answer
    assert marker not in upstream.received
    [step] = proxy.steps(session_id)
    assert (step["method"], step["status"], step["kind"]) == ("CONNECT", "denied", "mutation")
    assert step["url"] == f"{'https' if tls else 'http'}://{target}/"


def test_http_in_a_tunnel_is_still_judged_and_journaled(
    proxy: Undoproxy, upstream: RawUpstream, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    target = f"127.0.0.1:{upstream.port}"
    with tunnel(proxy.proxy_port, target, session=session_id, tls=True, ca=proxy.ca_bundle) as s:
        s.sendall(f"DELETE /{marker} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = read_answer(s)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert marker.encode() in upstream.received
    [step] = proxy.steps(session_id)
    assert (step["method"], step["status"]) == ("DELETE", "succeeded")


def test_a_method_sent_in_pieces_is_waited_for(
    proxy: Undoproxy, upstream: RawUpstream, session_id: str
) -> None:
    # Only the first bytes decide: "DEL" alone could still be a method.
    marker = uuid.uuid4().hex
    target = f"127.0.0.1:{upstream.port}"
    with tunnel(proxy.proxy_port, target, session=session_id) as s:
        s.sendall(b"DEL")
        time.sleep(0.3)
        s.sendall(f"ETE /{marker} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = read_answer(s)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert [s["method"] for s in proxy.steps(session_id)] == ["DELETE"]


def test_a_switch_to_another_protocol_than_websocket_relays_nothing(
    proxy: Undoproxy, upstream: RawUpstream, session_id: str
) -> None:
    marker = uuid.uuid4().hex.encode()
    target = f"127.0.0.1:{upstream.port}"
    with tunnel(proxy.proxy_port, target, session=session_id) as s:
        s.sendall(
            f"GET /switch HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade\r\n"
            "Upgrade: raw\r\n\r\n".encode()
        )
        answer = read_head(s)
        assert answer.startswith(b"HTTP/1.1 101"), answer
        try:
            s.sendall(b"\x00raw bytes " + marker)
            rest = read_answer(s)
        except OSError:
            rest = b""
    assert rest == b""  # closed: nothing is relayed either way
    time.sleep(0.2)
    assert marker not in upstream.received


def test_a_tunnel_to_the_dns_port_is_not_spoken_to_as_dns(
    proxy: Undoproxy, session_id: str
) -> None:
    # mitmproxy speaks DNS to ports 53 and 5353 whatever the bytes; here too only HTTP passes.
    try:
        dns = RawUpstream(port=5353).start()
    except OSError:
        pytest.skip("port 5353 is taken on this machine")
    try:
        marker = uuid.uuid4().hex.encode()
        # A DNS-over-TCP query for MARKER.test (length-prefixed).
        labels = b"".join(bytes([len(p)]) + p for p in (marker, b"test")) + b"\x00"
        query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + b"\x00\x01\x00\x01"
        with tunnel(proxy.proxy_port, "127.0.0.1:5353", session=session_id) as s:
            s.sendall(len(query).to_bytes(2, "big") + query)
            answer = read_answer(s)
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert marker not in dns.received
    finally:
        dns.stop()
