"""gRPC through undoproxy, with real grpcio on both sides (tests/support/grpc_server.py):
every kind of call passes and is journaled with its method and status; streams are not
buffered (a server stream's first message arrives while the server still holds the rest; a
bidirectional call that waits for each answer before it sends more completes); methods are
read or mutation by rules on their path; a refusal is a gRPC status, and a held stream waits
until a person decides.

The client reaches undoproxy with grpcio's own `grpc.http_proxy` option and trusts its CA
bundle; tests/runtimes/test_clients.py runs grpcio configured by `undoproxy env` alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.grpc_server import GrpcServer
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy

RULES = [
    {"name": "grpc-reads", "match": {"path": "/demo.Files/Get*"}, "kind": "read"},
    {"name": "grpc-watch", "match": {"path": "/demo.Files/Watch"}, "kind": "read"},
    {"name": "no-purge", "match": {"path": "/demo.Files/Purge"}, "action": "deny"},
    {"name": "hold-uploads", "match": {"path": "/demo.Files/Upload"}, "action": "hold"},
]


@pytest.fixture(scope="module")
def server(upstream_cert: tuple[Path, Path]) -> Iterator[GrpcServer]:
    instance = GrpcServer(upstream_cert).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"rules": RULES, "approvals": {"timeout": "60s"}}
    instance = Undoproxy(tmp_path_factory.mktemp("grpc"), config).start()
    yield instance
    instance.stop()


def _channel(proxy: Undoproxy, server: GrpcServer, session: str) -> grpc.Channel:
    roots = Path(proxy.ca_bundle).read_bytes()
    return grpc.secure_channel(
        server.target,
        grpc.ssl_channel_credentials(root_certificates=roots),
        options=[("grpc.http_proxy", proxy.proxy_url(session))],
    )


def _steps(proxy: Undoproxy, session: str) -> dict[str, dict[str, Any]]:
    return {s["url"].rsplit("/", 1)[1]: s for s in proxy.steps(session)}


def test_unary_calls_are_journaled_with_their_method_and_status(
    proxy: Undoproxy, server: GrpcServer, session_id: str
) -> None:
    with _channel(proxy, server, session_id) as channel:
        assert channel.unary_unary("/demo.Files/Get")(b"a.txt", timeout=10) == b"file:a.txt"
        assert channel.unary_unary("/demo.Files/Put")(b"data", timeout=10) == b"stored"
        with pytest.raises(grpc.RpcError) as failed:
            channel.unary_unary("/demo.Files/Fail")(b"x", timeout=10)
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    steps = _steps(proxy, session_id)
    get, put, fail = steps["Get"], steps["Put"], steps["Fail"]
    # Classified by rules on the method's path: Get* is a read, Put (no rule) a mutation.
    assert (get["kind"], get["rule"], get["status"]) == ("read", "grpc-reads", "succeeded")
    assert (put["kind"], put["status"]) == ("mutation", "succeeded")
    assert get["meta"]["grpc"] == {
        "service": "demo.Files",
        "method": "Get",
        "status": "OK",
        "status_code": 0,
    }
    # HTTP 200, yet the call failed: the gRPC status decides.
    assert (fail["status"], fail["response_status"]) == ("failed", 200)
    assert fail["error"] == "gRPC NOT_FOUND (5): no such file"
    assert fail["meta"]["grpc"]["status"] == "NOT_FOUND"
    # The request's framed message is journaled (5-byte gRPC prefix + "data").
    assert put["request"]["body_length"] == 9
    assert proxy.rollback(session_id)["steps"][0]["status"] == "irreversible"


def test_a_server_stream_is_not_buffered(
    proxy: Undoproxy, server: GrpcServer, session_id: str
) -> None:
    server.release.clear()
    with _channel(proxy, server, session_id) as channel:
        messages = channel.unary_stream("/demo.Files/Watch")(b"3", timeout=30)
        assert next(messages) == b"event 0"  # while the server still holds the rest
        server.release.set()
        assert list(messages) == [b"event 1", b"event 2"]
    watch = _steps(proxy, session_id)["Watch"]
    assert (watch["kind"], watch["status"]) == ("read", "succeeded")
    assert watch["meta"]["stream"]["complete"] is True
    assert watch["response"]["body_length"] == 3 * 5 + len(b"event 0event 1event 2")


def test_a_bidirectional_call_that_waits_for_each_answer_completes(
    proxy: Undoproxy, server: GrpcServer, session_id: str
) -> None:
    answered = threading.Semaphore(0)

    def requests() -> Iterator[bytes]:
        for i in range(3):
            yield f"m{i}".encode()
            assert answered.acquire(timeout=10), "no answer before the next message"

    with _channel(proxy, server, session_id) as channel:
        echoes = []
        for echo in channel.stream_stream("/demo.Files/Chat")(requests(), timeout=30):
            echoes.append(echo)
            answered.release()
    assert echoes == [b"echo:m0", b"echo:m1", b"echo:m2"]
    chat = _steps(proxy, session_id)["Chat"]
    assert (chat["kind"], chat["status"]) == ("mutation", "succeeded")
    assert chat["request"]["body_length"] == 3 * (5 + 2)
    assert chat["response"]["body_length"] == 3 * (5 + 7)


def test_a_denied_method_is_a_grpc_permission_denied_and_never_reaches_the_server(
    proxy: Undoproxy, server: GrpcServer, session_id: str
) -> None:
    with _channel(proxy, server, session_id) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary("/demo.Files/Purge")(b"all", timeout=10)
        # The channel works on.
        assert channel.unary_unary("/demo.Files/Get")(b"b", timeout=10) == b"file:b"
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details() == "undoproxy_blocked: denied by rule no-purge"
    metadata = dict(refused.value.trailing_metadata() or ())
    assert '"error": "undoproxy_blocked"' in metadata["undoproxy-error"]
    assert "Purge" not in server.calls
    assert _steps(proxy, session_id)["Purge"]["status"] == "denied"


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_a_held_client_stream_waits_for_a_person(
    proxy: Undoproxy, server: GrpcServer, session_id: str, verdict: str
) -> None:
    before = server.calls.count("Upload")
    with _channel(proxy, server, session_id) as channel:
        upload = channel.stream_unary("/demo.Files/Upload")
        pending = in_thread(lambda: upload.with_call(iter([b"ab", b"cde"]), timeout=30))
        approval = wait_pending(proxy, session_id)
        assert server.calls.count("Upload") == before  # nothing forwarded while held
        assert decide(proxy, approval["id"], verdict).status_code == 200
        if verdict == "approve":
            answer, _ = pending.result(30)
            assert answer == b"5"
        else:
            with pytest.raises(grpc.RpcError) as refused:
                pending.result(30)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert refused.value.details().startswith("undoproxy_denied")
    assert server.calls.count("Upload") == before + (verdict == "approve")
