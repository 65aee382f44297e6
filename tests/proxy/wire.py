"""Test helpers at the byte level: an upstream that records every byte it receives (so that a
relay of anything, HTTP or not, shows), and an agent that speaks raw bytes through the proxy
(CONNECT, optionally TLS inside the tunnel with undoproxy's CA)."""

from __future__ import annotations

import base64
import re
import socket
import socketserver
import ssl
import threading
from pathlib import Path


class RawUpstream:
    """Records every byte each connection sends (decrypted when it speaks TLS) and answers
    every complete HTTP/1 request in it `200 {}`."""

    def __init__(self, cert: tuple[Path, Path] | None = None, port: int = 0) -> None:
        self._lock = threading.Lock()
        self.connections: list[bytearray] = []
        ctx = None
        if cert is not None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*cert)
        upstream = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream._serve(self.request, ctx)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> RawUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def received(self) -> bytes:
        """Every byte every connection sent, one connection after another."""
        with self._lock:
            return b"".join(bytes(c) for c in self.connections)

    def _serve(self, sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
        sock.settimeout(10)
        record = bytearray()
        with self._lock:
            self.connections.append(record)
        try:
            if ctx is not None and sock.recv(1, socket.MSG_PEEK) == b"\x16":
                sock = ctx.wrap_socket(sock, server_side=True)
            pending = b""
            while data := sock.recv(65536):
                with self._lock:
                    record += data
                pending += data
                while (end := pending.find(b"\r\n\r\n")) >= 0:
                    found = re.search(rb"(?im)^content-length:\s*(\d+)", pending[:end])
                    size = int(found.group(1)) if found else 0
                    if len(pending) < end + 4 + size:
                        break
                    head, pending = pending[:end], pending[end + 4 + size :]
                    if re.search(rb"(?im)^upgrade:\s*raw", head):
                        # A protocol switch that is not a WebSocket: raw bytes from here on.
                        sock.sendall(
                            b"HTTP/1.1 101 Switching Protocols\r\n"
                            b"Upgrade: raw\r\nConnection: Upgrade\r\n\r\n"
                        )
                        continue
                    sock.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 2\r\n\r\n{}"
                    )
        except (OSError, ssl.SSLError):
            pass
        finally:
            sock.close()


def read_answer(sock: socket.socket | ssl.SSLSocket, limit: int = 1 << 20) -> bytes:
    """Everything the peer sends until it closes, or until one whole response with a
    Content-Length has arrived."""
    data = b""
    try:
        while len(data) < limit:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                found = re.search(rb"(?im)^content-length:\s*(\d+)", data[:end])
                if found and len(data) >= end + 4 + int(found.group(1)):
                    break
    except (ConnectionResetError, TimeoutError, ssl.SSLError):
        pass
    return data


def read_head(sock: socket.socket | ssl.SSLSocket) -> bytes:
    """A response's status line and headers, read byte by byte (nothing after them)."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return head


def tunnel(
    proxy_port: int,
    target: str,
    *,
    session: str | None = None,
    tls: bool = False,
    ca: str | None = None,
    sni: str | None = None,
) -> socket.socket | ssl.SSLSocket:
    """A socket through `CONNECT target` (200 checked), TLS inside it when `tls` (verified
    against undoproxy's CA, SNI `sni`, no ALPN: as a raw client would)."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=15)
    auth = ""
    if session is not None:
        token = base64.b64encode(f"{session}:x".encode()).decode()
        auth = f"Proxy-Authorization: Basic {token}\r\n"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n".encode())
    head = read_head(sock)
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(f"CONNECT refused: {head!r}")
    if not tls:
        return sock
    ctx = ssl.create_default_context(cafile=ca)
    if sni is None:
        ctx.check_hostname = False
    return ctx.wrap_socket(sock, server_hostname=sni)
