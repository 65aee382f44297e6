"""A real gRPC server (grpcio), over TLS, with one method of each kind on `demo.Files`:

    /demo.Files/Get       unary -> unary         b"file:" + the request
    /demo.Files/Put       unary -> unary         stores the request; b"stored"
    /demo.Files/Fail      unary -> unary         fails: NOT_FOUND "no such file"
    /demo.Files/Watch     unary -> stream        N messages (N = the request, as digits); the
                                                 first, then the rest once `release` is set: a
                                                 buffering proxy would deliver none before
    /demo.Files/Upload    stream -> unary        the number of bytes received, as digits
    /demo.Files/Chat      stream <-> stream      echoes each message as it comes (a client
                                                 that waits for each echo before sending the
                                                 next deadlocks behind a buffering proxy)

    any other method      unary -> unary         echoes the request

Messages are raw bytes (no protobuf schema needed: the method handlers take and return bytes).
`calls` lists the methods of demo.Files that reached the server, `paths` every method's full
path, `stored` what Put stored.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

SERVICE = "demo.Files"


class GrpcServer:
    """grpcio on `host` (a port of its own), TLS with `cert`, until stop()."""

    def __init__(self, cert: tuple[Path, Path], host: str = "127.0.0.1") -> None:
        self.calls: list[str] = []
        self.paths: list[str] = []
        self.stored: list[bytes] = []
        self.release = threading.Event()
        self.host = host
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handlers = {
            "Get": grpc.unary_unary_rpc_method_handler(self._get),
            "Put": grpc.unary_unary_rpc_method_handler(self._put),
            "Fail": grpc.unary_unary_rpc_method_handler(self._fail),
            "Watch": grpc.unary_stream_rpc_method_handler(self._watch),
            "Upload": grpc.stream_unary_rpc_method_handler(self._upload),
            "Chat": grpc.stream_stream_rpc_method_handler(self._chat),
        }
        self.server.add_generic_rpc_handlers(
            (
                _Echo(self.paths, set(handlers)),
                grpc.method_handlers_generic_handler(SERVICE, handlers),
            )
        )
        credentials = grpc.ssl_server_credentials([(cert[1].read_bytes(), cert[0].read_bytes())])
        self.port = self.server.add_secure_port(f"{host}:0", credentials)

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> GrpcServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(grace=1).wait(5)

    def _get(self, request: bytes, context: Any) -> bytes:
        self.calls.append("Get")
        return b"file:" + request

    def _put(self, request: bytes, context: Any) -> bytes:
        self.calls.append("Put")
        self.stored.append(request)
        return b"stored"

    def _fail(self, request: bytes, context: Any) -> bytes:
        self.calls.append("Fail")
        context.abort(grpc.StatusCode.NOT_FOUND, "no such file")
        return b""

    def _watch(self, request: bytes, context: Any) -> Iterator[bytes]:
        self.calls.append("Watch")
        for i in range(int(request or b"3")):
            yield f"event {i}".encode()
            if i == 0:
                self.release.wait(30)

    def _upload(self, requests: Iterator[bytes], context: Any) -> bytes:
        self.calls.append("Upload")
        return str(sum(len(r) for r in requests)).encode()

    def _chat(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        self.calls.append("Chat")
        for message in requests:
            yield b"echo:" + message


class _Echo(grpc.GenericRpcHandler):
    """Any method: a unary echo (and every method's path is noted)."""

    def __init__(self, paths: list[str], known: set[str]) -> None:
        self.paths = paths
        self.known = {f"/{SERVICE}/{name}" for name in known}

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        self.paths.append(method)
        if method in self.known:
            return None  # demo.Files' own handler takes it
        return grpc.unary_unary_rpc_method_handler(lambda request, context: request)
