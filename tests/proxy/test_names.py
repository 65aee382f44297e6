"""One name per request: rules judge the host the upstream serves, or undoproxy refuses.

A deny rule names `localhost`; the upstream serves both `localhost` and `127.0.0.1`. Every way
an agent can give the two names at once (absolute URL vs Host, CONNECT target vs SNI vs Host,
HTTP/2's :authority, an absolute URL or a second Host inside a tunnel) goes through a real
`undoproxy run` with curl (`-H Host`, `--connect-to`) or a raw socket, and must end in 421 or
400 with nothing forwarded; the same names, agreeing, are judged by the rule.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import received
from tests.proxy.wire import read_answer, tunnel
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.proxy.names import check, host_of

RULES = [
    {
        "name": "nothing-for-localhost",
        "match": {"host": "localhost", "method": "POST"},
        "action": "deny",
    },
    {
        "name": "restore-items",
        "match": {"method": "PUT", "path": "/items/**"},
        "compensate": "restore",
    },
]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("names"), {"rules": RULES}).start()
    yield instance
    instance.stop()


def curl(proxy: Undoproxy, session: str, url: str, *args: str) -> tuple[int, dict[str, object]]:
    """(status, JSON body or {}) of curl through the proxy into `session`."""
    done = subprocess.run(
        [
            "curl", "-sS", "--max-time", "20", "-x", proxy.proxy_url(session),
            "--cacert", proxy.ca_bundle, "-o", "-", "-w", "\n%{http_code}", *args, url,
        ],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    body, _, code = done.stdout.rpartition("\n")
    try:
        parsed = json.loads(body) if body.strip() else {}
    except ValueError:
        parsed = {"raw": body}
    return int(code or 0), parsed


def _reached(upstream: ThreadedServer, marker: str) -> list[str]:
    return [r.method for r in received(upstream) if marker in r.path]


# (how, URL scheme and host the agent writes, curl's extra arguments): names that disagree.
CONNECT_TO = "localhost:{port}:127.0.0.1:{port}"  # curl CONNECTs to 127.0.0.1, SNI localhost
DISAGREEING = [
    ("URL 127.0.0.1, Host localhost", "http", "127.0.0.1", ["-H", "Host: localhost"]),
    ("URL localhost, Host 127.0.0.1", "http", "localhost", ["-H", "Host: 127.0.0.1"]),
    ("CONNECT 127.0.0.1, Host localhost", "https", "127.0.0.1", ["-H", "Host: localhost"]),
    ("CONNECT+SNI localhost, Host 127.0.0.1", "https", "localhost", ["-H", "Host: 127.0.0.1"]),
    ("CONNECT 127.0.0.1, SNI+Host localhost", "https", "localhost", ["--connect-to", CONNECT_TO]),
    ("h2 :authority localhost", "https", "127.0.0.1", ["--http2", "-H", "Host: localhost"]),
]


@pytest.mark.parametrize(
    ("how", "scheme", "host", "extra"), DISAGREEING, ids=[d[0] for d in DISAGREEING]
)
def test_names_that_disagree_are_refused_with_421(
    proxy: Undoproxy,
    tls_upstream: ThreadedServer,
    plain_upstream: ThreadedServer,
    session_id: str,
    how: str,
    scheme: str,
    host: str,
    extra: list[str],
) -> None:
    upstream = tls_upstream if scheme == "https" else plain_upstream
    marker = uuid.uuid4().hex
    url = f"{scheme}://{host}:{upstream.port}/x/{marker}"
    args = [a.format(port=upstream.port) for a in extra]
    status, body = curl(proxy, session_id, url, "-X", "POST", "-d", "{}", *args)
    assert (status, body.get("error")) == (421, "undoproxy_misdirected"), body
    assert "localhost" in str(body["message"]) and "127.0.0.1" in str(body["message"])
    assert _reached(upstream, marker) == []
    [step] = proxy.steps(session_id)
    assert (step["status"], step["response_status"]) == ("denied", 421)


@pytest.mark.parametrize(
    ("scheme", "host", "extra", "status"),
    [
        ("http", "localhost", [], 403),  # the rule names the host the upstream serves
        ("https", "localhost", [], 403),
        ("https", "localhost", ["--http2"], 403),
        ("https", "localhost", ["--resolve", "localhost:{port}:127.0.0.1"], 403),
        ("http", "127.0.0.1", [], 200),
        ("https", "127.0.0.1", [], 200),
        ("https", "localhost", ["-H", "Host: LocalHost.:{port}"], 403),  # case, trailing dot
    ],
)
def test_names_that_agree_are_judged_by_that_name(
    proxy: Undoproxy,
    tls_upstream: ThreadedServer,
    plain_upstream: ThreadedServer,
    session_id: str,
    scheme: str,
    host: str,
    extra: list[str],
    status: int,
) -> None:
    upstream = tls_upstream if scheme == "https" else plain_upstream
    marker = uuid.uuid4().hex
    url = f"{scheme}://{host}:{upstream.port}/x/{marker}"
    args = [a.format(port=upstream.port) for a in extra]
    got, body = curl(proxy, session_id, url, "-X", "POST", "-d", "{}", *args)
    assert got == status, body
    if status == 403:
        assert body["rule"] == "nothing-for-localhost"
        assert _reached(upstream, marker) == []
    else:
        assert _reached(upstream, marker) == ["POST"]


MISDIRECTED, BAD_HOST = (421, "undoproxy_misdirected"), (400, "undoproxy_bad_host")
IN_TUNNEL = {
    "Host": ("POST /x/MARK HTTP/1.1\r\nHost: localhost:PORT\r\n", MISDIRECTED),
    "absolute URL": (
        "POST http://localhost:PORT/x/MARK HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\n",
        MISDIRECTED,
    ),
    "two Hosts": (
        "POST /x/MARK HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nHost: localhost\r\n",
        BAD_HOST,
    ),
    "the same Host twice": (
        "POST /x/MARK HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nHost: 127.0.0.1:PORT\r\n",
        BAD_HOST,
    ),
    "not a host": ("POST /x/MARK HTTP/1.1\r\nHost: 127.0.0.1/evil\r\n", BAD_HOST),
}


@pytest.mark.parametrize("case", list(IN_TUNNEL))
def test_names_inside_a_plain_tunnel(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str, case: str
) -> None:
    request_text, (status, error) = IN_TUNNEL[case]
    marker = uuid.uuid4().hex
    port = str(plain_upstream.port)
    text = request_text.replace("MARK", marker).replace("PORT", port)
    with tunnel(proxy.proxy_port, f"127.0.0.1:{port}", session=session_id) as s:
        s.sendall(f"{text}Content-Length: 2\r\n\r\n{{}}".encode())
        answer = read_answer(s)
    assert answer.startswith(f"HTTP/1.1 {status}".encode()), answer
    assert f'"{error}"'.encode() in answer
    assert _reached(plain_upstream, marker) == []


def test_snapshots_and_undos_go_to_the_name_the_upstream_serves(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    # The upstream serves `localhost` (SNI and Host); so do the snapshot before the PUT and
    # the compensation that will undo it.
    marker = uuid.uuid4().hex
    port = tls_upstream.port
    status, _ = curl(
        proxy, session_id, f"https://localhost:{port}/items/{marker}", "-X", "PUT", "-d", "{}"
    )
    assert status == 200
    seen = [r for r in received(tls_upstream) if marker in r.path]
    assert [r.method for r in seen][:2] == ["GET", "PUT"]  # the snapshot, then the write
    assert {r.headers["Host"] for r in seen} == {f"localhost:{port}"}
    [step] = proxy.steps(session_id)
    assert step["compensation"]["url"].startswith(f"https://localhost:{port}/items/")


# --- the pure check ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "host"),
    [
        ("a.test", "a.test"),
        ("A.Test.:443", "a.test"),
        ("a.test:", "a.test"),
        ("[::1]:80", "::1"),
        ("[::1]", "::1"),
        ("1.2.3.4:5", "1.2.3.4"),
        ("", None),
        ("a b", None),
        ("a/b", None),
        ("x@y", None),
        ("a:99999", None),
        ("a:0", None),
        ("[::1", None),
        ("[::1]x", None),
    ],
)
def test_host_of(value: str, host: str | None) -> None:
    assert host_of(value) == host


@pytest.mark.parametrize(
    ("target", "authority", "hosts", "sni", "status"),
    [
        ("a.test", "", ["a.test"], None, None),
        ("a.test", "", [], None, None),  # HTTP/1.0 without Host
        ("a.test", "", ["A.TEST.:8443"], "a.test", None),
        ("::1", "", ["[::1]:5000"], None, None),
        ("a.test", "a.test:443", [], "a.test", None),
        ("127.0.0.1", "", ["a.test"], None, 421),
        ("127.0.0.1", "", ["127.0.0.1"], "a.test", 421),
        ("a.test", "b.test", ["a.test"], None, 421),
        ("a.test", "", ["a.test", "a.test"], None, 400),
        ("a.test", "", [""], None, 400),
        ("a.test", "", ["a.test"], "a.test:443", 400),  # an SNI never carries a port
    ],
)
def test_check(
    target: str, authority: str, hosts: list[str], sni: str | None, status: int | None
) -> None:
    wrong = check(target, authority=authority, hosts=hosts, sni=sni)
    assert (wrong.status if wrong else None) == status
