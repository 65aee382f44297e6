"""Each runtime of docs/clients.md as a real process, configured only by `undoproxy env
--session ID`, calling an upstream whose certificate it trusts as a public API's: its request
must be a step of that session (so it went through undoproxy and trusted its CA: undoproxy sees
a request only after the client accepted its certificate). A request the upstream got without
a step is reported as what it is, a bypass.

A row here is a row marked tested in docs/clients.md; tests/runtimes/test_docs.py checks
that the two agree. The protocol rows call servers of their protocol (`server`): the echo
upstream's SSE and WebSocket endpoints, a real MCP server (the `mcp` SDK's FastMCP, over
Streamable HTTP) and a real gRPC server (grpcio), each on 127.0.0.2 over TLS with a
certificate the clients trust as a public API's.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.runtimes.conftest import (
    PYTHON,
    agent_env,
    in_session,
    need,
    need_module,
    received,
    run,
    skip_or_fail,
)
from tests.support.grpc_server import GrpcServer
from tests.support.mcp_server import McpServer
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

NODE_MODULES = Path(__file__).resolve().parents[2] / ".venv" / "node" / "node_modules"


@dataclass(frozen=True)
class Client:
    """One row: how to make one GET of `url` with this runtime, and what it needs."""

    name: str
    argv: Callable[[str, Path], list[str]]
    tool: str = ""
    module: str = ""
    npm: str = ""  # a package .ci/run installs into .venv/node
    remote: bool = False  # never proxies loopback: call the test host (a network namespace)
    may_fail: bool = False  # an SDK that cannot parse the echo's answer: only the step counts
    server: str = "api"  # the upstream it calls: api (the echo upstream) | mcp | grpc
    # where on that upstream, from the marker that names the call in the journal
    target: Callable[[str], str] = lambda marker: marker


def _py(code: str) -> Callable[[str, Path], list[str]]:
    return lambda url, tmp: [PYTHON, "-c", textwrap.dedent(code), url]


def _write(name: str, text: str, *argv: str) -> Callable[[str, Path], list[str]]:
    def build(url: str, tmp: Path) -> list[str]:
        path = tmp / name
        path.write_text(textwrap.dedent(text))
        return [a.replace("{file}", str(path)) for a in argv] + [url]

    return build


JAVA = """\
    import java.net.URI;
    import java.net.http.HttpClient;
    import java.net.http.HttpRequest;
    import java.net.http.HttpResponse;

    public class Probe {
        public static void main(String[] args) throws Exception {
            HttpResponse<String> r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create(args[0] + "-httpclient")).build(),
                HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() != 200) throw new RuntimeException("HTTP " + r.statusCode());
            var c = (java.net.HttpURLConnection) new java.net.URL(args[0] + "-urlconnection")
                .openConnection();
            int status = c.getResponseCode();
            if (status != 200) throw new RuntimeException("HTTP " + status);
        }
    }
"""

GO = """\
    package main

    import (
        "fmt"
        "net/http"
        "os"
    )

    func main() {
        r, err := http.Get(os.Args[1])
        if err != nil {
            fmt.Println(err)
            os.Exit(1)
        }
        if r.StatusCode != 200 {
            os.Exit(2)
        }
    }
"""

CLIENTS = [
    Client("curl", lambda url, tmp: ["curl", "-sS", "--fail", "-o", "/dev/null", url], "curl"),
    Client("wget", lambda url, tmp: ["wget", "-q", "-t", "1", "-O", "/dev/null", url], "wget"),
    Client("git", lambda url, tmp: ["git", "ls-remote", url + "/repo.git"], "git", may_fail=True),
    Client(
        "pip",
        lambda url, tmp: [
            PYTHON,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "-q",
            "-d",
            str(tmp),
            "--index-url",
            url + "/simple/",
            "nothing",
        ],
        may_fail=True,
    ),
    Client("python-urllib", _py("import sys, urllib.request; urllib.request.urlopen(sys.argv[1])")),
    Client(
        "python-requests",
        _py("import sys, requests; requests.get(sys.argv[1]).raise_for_status()"),
        module="requests",
    ),
    Client(
        "python-httpx",
        _py("import sys, httpx; httpx.get(sys.argv[1]).raise_for_status()"),
        module="httpx",
    ),
    Client(
        "python-aiohttp",
        _py("""
            import asyncio, sys, aiohttp
            async def main():
                # aiohttp reads the proxy and CA variables only with trust_env=True
                async with aiohttp.ClientSession(trust_env=True) as s:
                    async with s.get(sys.argv[1]) as r:
                        r.raise_for_status()
            asyncio.run(main())
        """),
        module="aiohttp",
    ),
    Client(
        "node-fetch",
        lambda url, tmp: [
            "node",
            "-e",
            "fetch(process.argv[1]).then(r => { if (!r.ok) process.exit(2) })",
            url,
        ],
        "node",
    ),
    Client(
        "node-https",
        lambda url, tmp: [
            "node",
            "-e",
            "require('https').get(process.argv[1], r => process.exit(r.statusCode - 200))",
            url,
        ],
        "node",
    ),
    Client(
        "node-undici",
        lambda url, tmp: [
            "node",
            "-e",
            "require('undici').request(process.argv[1])"
            ".then(r => { if (r.statusCode !== 200) process.exit(2); return r.body.text() })",
            url,
        ],
        "node",
        npm="undici",
    ),
    Client(
        "node-axios",
        lambda url, tmp: [
            "node",
            "-e",
            "require('axios').get(process.argv[1])"
            ".catch(e => { console.error(e.message); process.exit(1) })",
            url,
        ],
        "node",
        npm="axios",
        remote=True,  # axios's NO_PROXY treats every loopback address as 127.0.0.1
    ),
    Client("java", _write("Probe.java", JAVA, "java", "{file}"), "java", remote=True),
    Client("go", _write("probe.go", GO, "go", "run", "{file}"), "go", remote=True),
    Client(
        "ruby",
        lambda url, tmp: [
            "ruby",
            "-rnet/http",
            "-e",
            "exit(Net::HTTP.get_response(URI(ARGV[0])).code == '200')",
            url,
        ],
        "ruby",
        remote=True,
    ),
    Client(
        "php-curl",
        lambda url, tmp: [
            "php",
            "-r",
            "$c = curl_init($argv[1]); curl_setopt($c, CURLOPT_RETURNTRANSFER, true);"
            "exit(curl_exec($c) === false ? 1 : 0);",
            url,
        ],
        "php",
    ),
    # SDKs: the echo upstream's answer is not what they expect; the step is what counts.
    Client(
        "openai",
        _py("""
        import sys, openai
        openai.OpenAI(base_url=sys.argv[1], api_key="sk-test", max_retries=0).models.list()
    """),
        module="openai",
        may_fail=True,
    ),
    Client(
        "anthropic",
        _py("""
        import sys, anthropic
        anthropic.Anthropic(base_url=sys.argv[1], api_key="sk-test", max_retries=0).models.list()
    """),
        module="anthropic",
        may_fail=True,
    ),
    Client(
        "stripe",
        _py("""
        import os, sys, stripe
        stripe.api_key = "sk_test_x"
        stripe.api_base = sys.argv[1]
        stripe.ca_bundle_path = os.environ["SSL_CERT_FILE"]  # stripe ignores the CA variables
        stripe.max_network_retries = 0
        stripe.Customer.list()
    """),
        module="stripe",
        may_fail=True,
    ),
    Client(
        "pygithub",
        _py("""
        import sys, github
        github.Github(base_url=sys.argv[1], retry=None).get_user("octocat").login
    """),
        module="github",
        may_fail=True,
    ),
    Client(
        "slack_sdk",
        _py("""
        import sys, slack_sdk
        slack_sdk.WebClient(base_url=sys.argv[1] + "/", token="xoxb-test").api_test()
    """),
        module="slack_sdk",
        may_fail=True,
    ),
    Client(
        "boto3",
        _py("""
        import sys, boto3
        boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                     aws_access_key_id="x", aws_secret_access_key="y").list_buckets()
    """),
        module="boto3",
        may_fail=True,
    ),
]


MCP_CLIENT = """
    import asyncio, sys
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def main():
        # the SDK's own HTTP client (httpx, trust_env): HTTPS_PROXY, SSL_CERT_FILE
        async with streamablehttp_client(sys.argv[1]) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("read_file", {"path": "hello.txt"})
                assert result.content[0].text == "hello world", result

    asyncio.run(main())
"""

GRPC_CLIENT = """
    import sys, grpc
    target, _, method = sys.argv[1].partition("/")
    # grpcio: https_proxy (grpc_proxy), GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
    channel = grpc.secure_channel(target, grpc.ssl_channel_credentials())
    assert channel.unary_unary("/" + method)(b"ping", timeout=30) == b"ping"
"""

WEBSOCKET_CLIENT = """
    import sys
    from websockets.sync.client import connect
    # websockets >= 15 takes the proxy from https_proxy; the CA from SSL_CERT_FILE
    with connect(sys.argv[1]) as ws:
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
"""

SSE_CLIENT = """
    import sys, httpx
    with httpx.stream("GET", sys.argv[1], timeout=30) as r:
        events = [line for line in r.iter_lines() if line.startswith("data:")]
    assert len(events) == 3, events
"""

CLIENTS += [
    Client(
        "curl-http2",
        lambda url, tmp: ["curl", "-sS", "--fail", "--http2", "-T", "-", "-o", "/dev/null", url],
        "curl",
    ),
    Client(
        "sse-httpx",
        _py(SSE_CLIENT),
        module="httpx",
        target=lambda marker: f"/sse?n=3&m={marker}",
    ),
    Client(
        "websocket-websockets",
        lambda url, tmp: [PYTHON, "-c", textwrap.dedent(WEBSOCKET_CLIENT), "wss" + url[5:]],
        module="websockets",
        target=lambda marker: f"/ws{marker}",
    ),
    Client("mcp-sdk", _py(MCP_CLIENT), module="mcp", server="mcp", target=lambda m: f"/mcp?m={m}"),
    Client("grpcio", _py(GRPC_CLIENT), module="grpc", server="grpc"),
]


@pytest.fixture(scope="module")
def mcp_upstream(public_cert: tuple[Path, Path]) -> Iterator[McpServer]:
    """A real MCP server (FastMCP over Streamable HTTP) on 127.0.0.2, over TLS."""
    server = McpServer(cert=public_cert, host="127.0.0.2").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def grpc_upstream(public_cert: tuple[Path, Path]) -> Iterator[GrpcServer]:
    """A real gRPC server (grpcio) on 127.0.0.2, over TLS."""
    server = GrpcServer(public_cert, host="127.0.0.2").start()
    yield server
    server.stop()


def _address(client: Client, upstream: Any, marker: str) -> str:
    if isinstance(upstream, GrpcServer):
        return upstream.target + client.target(marker)  # host:port/service/method
    return str(upstream.base_url) + client.target(marker)


def _reached(upstream: Any, marker: str) -> list[str]:
    """What the upstream got that names `marker`."""
    if isinstance(upstream, McpServer | GrpcServer):
        return [p for p in upstream.paths if marker in p]
    return [r.path for r in received(upstream) if marker in r.path]


@pytest.mark.parametrize("client", CLIENTS, ids=[c.name for c in CLIENTS])
def test_runtime_goes_through_undoproxy_into_its_session(
    client: Client,
    rt_proxy: Undoproxy,
    api_upstream: ThreadedServer,
    request: pytest.FixtureRequest,
    session_id: str,
    tmp_path: Path,
) -> None:
    if client.tool:
        need(client.tool)
    if client.module:
        need_module(client.module)
    if client.npm and not (NODE_MODULES / client.npm).is_dir():
        skip_or_fail(f"the npm package {client.npm} is not in {NODE_MODULES} (.ci/run installs it)")
    upstream: Any = api_upstream
    if client.remote:
        upstream = request.getfixturevalue("remote_upstream")
    elif client.server != "api":
        upstream = request.getfixturevalue(f"{client.server}_upstream")
    env = agent_env(rt_proxy, session_id)
    if NODE_MODULES.is_dir():
        env["NODE_PATH"] = str(NODE_MODULES)
    env.setdefault("GOCACHE", str(Path.home() / ".cache" / "go-build"))
    env["GOFLAGS"] = "-mod=mod"
    env["GO111MODULE"] = "off"
    marker = f"/echo/{client.name}-{session_id}"
    done = run(client.argv(_address(client, upstream, marker), tmp_path), env, cwd=tmp_path)
    if not client.may_fail:
        assert done.returncode == 0, done.stdout + done.stderr
    found = in_session(rt_proxy, session_id, marker)()
    reached = _reached(upstream, marker)
    assert found, (
        f"{client.name} went around undoproxy (the upstream got {reached}, the session has no step)"
        if reached
        else f"{client.name} failed:"
    ) + f"\n{done.stdout}{done.stderr}"


def test_aiohttp_without_trust_env_goes_around_and_is_caught(
    rt_proxy: Undoproxy, api_upstream: ThreadedServer, session_id: str
) -> None:
    """The caveat of the aiohttp row, shown: without trust_env=True aiohttp ignores the proxy
    variables; the upstream (trusted, as a public API would be) answers it directly and the
    session has no step. This is the shape of every bypass the tests above would report."""
    need_module("aiohttp")
    marker = f"/echo/aiohttp-direct-{session_id}"
    code = textwrap.dedent("""
        import asyncio, sys, aiohttp
        async def main():
            async with aiohttp.ClientSession() as s:
                async with s.get(sys.argv[1]) as r:
                    r.raise_for_status()
        asyncio.run(main())
    """)
    done = run(
        [PYTHON, "-c", code, api_upstream.base_url + marker], agent_env(rt_proxy, session_id)
    )
    assert done.returncode == 0, done.stderr  # nothing failed: the bypass is silent
    assert [r.path for r in received(api_upstream) if marker in r.path] == [marker]
    assert in_session(rt_proxy, session_id, marker)() == []
