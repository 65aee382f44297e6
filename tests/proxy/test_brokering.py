"""The credential broker through a real `undoproxy run`: agents send placeholders (or nothing),
upstreams get the real value, and nothing an agent or a person reads ever holds it.

One undoproxy for the module, with three secrets: `echo` (a file, so that it can be rotated)
on the echo upstream, `rest` (an environment variable) on a REST API that refuses anything but
the real token (so its snapshots, undos and read-backs prove undoproxy used it too), and
`scoped` on a plain-HTTP upstream, for the sessions `allowed-*` only.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import received
from tests.support import rest
from tests.support.certs import server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

TAG = uuid.uuid4().hex[:8]
ECHO_REAL = f"sk-echo-real-{TAG}"
ECHO_ROTATED = f"sk-echo-rotated-{TAG}"
REST_REAL = f"rest-real-token-{TAG}"
SCOPED_REAL = f"scoped-real-key-{TAG}"
REDIRECT_REAL = f"redirect-real-key-{TAG}"
ECHO_PLACEHOLDER = "undoproxy-placeholder-echo-key"
SCOPED_PLACEHOLDER = "undoproxy-placeholder-scoped-key"
REDIRECT_PLACEHOLDER = "undoproxy-placeholder-redirect-key"
REALS = (ECHO_REAL, ECHO_ROTATED, REST_REAL, SCOPED_REAL, REDIRECT_REAL)


class Redirector:
    """An HTTPS upstream that answers every request 302 to `target` (another origin), and
    records the headers it got."""

    def __init__(self, cert: tuple[Path, Path]) -> None:
        self.seen: list[dict[str, str]] = []
        self.target = ""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self.server = ThreadedServer(app, server_context(cert)).start()

    async def _answer(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        return web.Response(status=302, headers={"Location": self.target + request.path})


@pytest.fixture(scope="module")
def api(upstream_cert: tuple[Path, Path]) -> Iterator[tuple[ThreadedServer, rest.RestState]]:
    state = rest.RestState(token=REST_REAL)
    server = rest.serve(state, upstream_cert)
    yield server, state
    server.stop()


@pytest.fixture(scope="module")
def redirector(
    upstream_cert: tuple[Path, Path], tls_upstream: ThreadedServer
) -> Iterator[Redirector]:
    r = Redirector(upstream_cert)
    r.target = f"https://localhost:{tls_upstream.port}"  # another origin: another host name
    yield r
    r.server.stop()


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret-files") / "echo-key"
    path.write_text(ECHO_REAL + "\n")
    return path


@pytest.fixture(scope="module")
def up(
    tmp_path_factory: pytest.TempPathFactory,
    tls_upstream: ThreadedServer,
    plain_upstream: ThreadedServer,
    api: tuple[ThreadedServer, rest.RestState],
    redirector: Redirector,
    key_file: Path,
) -> Iterator[Undoproxy]:
    config = {
        "secrets": [
            {
                "name": "echo",
                "host": f"127.0.0.1:{tls_upstream.port}",
                "header": "Authorization",
                "value": f"Bearer ${{file:{key_file}}}",
                "env": "ECHO_KEY",
            },
            {
                "name": "rest",
                "host": f"127.0.0.1:{api[0].port}",
                "header": "Authorization",
                "value": "Bearer ${TEST_REST_KEY}",
            },
            {
                "name": "scoped",
                "host": f"127.0.0.1:{plain_upstream.port}",
                "header": "X-Api-Key",
                "value": "${SCOPED_KEY}",
                "sessions": ["allowed-*"],
            },
            {
                "name": "redirect",
                "host": redirector.server.host + f":{redirector.server.port}",
                "header": "X-Api-Key",
                "value": "${REDIRECT_KEY}",
            },
        ]
    }
    env = {"TEST_REST_KEY": REST_REAL, "SCOPED_KEY": SCOPED_REAL, "REDIRECT_KEY": REDIRECT_REAL}
    instance = Undoproxy(tmp_path_factory.mktemp("broker"), config, env=env).start()
    yield instance
    instance.stop()


def _session(prefix: str = "b") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _no_real_value(text: str) -> None:
    for real in REALS:
        assert real not in text


def _last(server: ThreadedServer, path: str) -> dict[str, str]:
    hits = [r for r in received(server) if r.path.startswith(path)]
    assert hits, f"{path} never reached the upstream"
    return hits[-1].headers


def test_the_upstream_gets_the_real_value_the_agent_and_journal_the_placeholder(
    up: Undoproxy, tls_upstream: ThreadedServer
) -> None:
    session = _session()
    agent = up.agent(session)
    base = tls_upstream.base_url
    read = agent.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {ECHO_PLACEHOLDER}"})
    assert read.status_code == 200
    assert _last(tls_upstream, "/v1/models")["Authorization"] == f"Bearer {ECHO_REAL}"
    # The echo upstream answers with the headers it got: the agent reads the placeholder.
    assert read.json()["headers"]["Authorization"] == f"Bearer {ECHO_PLACEHOLDER}"
    write = agent.put(f"{base}/v1/things/1", json={"a": 1})  # no Authorization at all
    assert write.status_code == 200
    assert _last(tls_upstream, "/v1/things/1")["Authorization"] == f"Bearer {ECHO_REAL}"
    time.sleep(0.3)  # reads are journaled in the writer's next batch
    shown = up.api("GET", f"/api/sessions/{session}").text
    assert "/v1/models" in shown and "/v1/things/1" in shown
    _no_real_value(shown)
    _no_real_value(up.cli("show", session).stdout)


@pytest.mark.parametrize(
    ("where", "request_args"),
    [
        ("the Authorization header", {"headers": {"Authorization": f"Bearer {REST_REAL}"}}),
        ("the X-Other header", {"headers": {"X-Other": REST_REAL}}),
        ("the URL", {"params": {"q": REST_REAL}}),
        ("the body", {"json": {"note": f"the key is {REST_REAL}"}}),
        ("the body", {"data": {"note": REST_REAL}}),
        ("the X-Undoproxy-Intent header", {"headers": {"X-Undoproxy-Intent": REST_REAL}}),
    ],
)
def test_a_real_value_from_the_agent_is_refused(
    up: Undoproxy, plain_upstream: ThreadedServer, where: str, request_args: dict[str, Any]
) -> None:
    """Wherever the agent puts a real value, to whatever host: it was not supposed to have
    it. Nothing is forwarded, and the journal records where it was, never what."""
    session = _session()
    marker = f"/exfiltrate/{uuid.uuid4().hex}"
    answer = up.agent(session).post(plain_upstream.base_url + marker, **request_args)
    assert answer.status_code == 403
    assert answer.headers["X-Undoproxy-Decision"] == "denied"
    body = answer.json()
    assert body["error"] == "undoproxy_secret_in_agent" and body["secret"] == "rest"
    assert where in body["message"]
    _no_real_value(answer.text)
    assert not [r for r in received(plain_upstream) if r.path.startswith(marker)]
    steps = up.steps(session)
    assert [(s["status"], s["response_status"]) for s in steps] == [("denied", 403)]
    _no_real_value(json.dumps(steps))


def test_sessions_scope_who_gets_a_secret(up: Undoproxy, plain_upstream: ThreadedServer) -> None:
    base = plain_upstream.base_url
    allowed = up.agent(_session("allowed"))
    assert allowed.get(f"{base}/scoped/1", headers={"X-Api-Key": SCOPED_PLACEHOLDER}).ok
    assert _last(plain_upstream, "/scoped/1")["X-Api-Key"] == SCOPED_REAL
    other = up.agent(_session("other"))
    # A session the entry does not serve: its own request passes as it is...
    assert other.get(f"{base}/scoped/2", headers={"X-Api-Key": "its-own-key"}).ok
    assert _last(plain_upstream, "/scoped/2")["X-Api-Key"] == "its-own-key"
    # ...but the placeholder is refused: undoproxy would not put the secret in.
    refused = other.get(f"{base}/scoped/3", headers={"X-Api-Key": SCOPED_PLACEHOLDER})
    assert refused.status_code == 403
    assert refused.json()["error"] == "undoproxy_secret_not_allowed"
    assert not [r for r in received(plain_upstream) if r.path.startswith("/scoped/3")]


def test_undoproxy_snapshots_and_undoes_with_the_real_value(
    up: Undoproxy, api: tuple[ThreadedServer, rest.RestState]
) -> None:
    """The REST API answers 401 to anything but the real token: the agent's writes (with a
    placeholder), undoproxy's snapshots, its undos and its read-backs all need it."""
    server, state = api
    state.items["1"] = {"id": "1", "name": "Ada"}
    before = state.snapshot()
    session = _session()
    agent = up.agent(
        session, headers={"Authorization": "Bearer undoproxy-placeholder-test-rest-key"}
    )
    assert agent.put(f"{server.base_url}/items/1", json={"name": "Eve"}).ok
    created = agent.post(f"{server.base_url}/items", json={"name": "new"})
    assert created.status_code == 201
    assert state.snapshot() != before
    report = up.rollback(session)
    assert report["state"] == "rolled_back", report
    assert [s["status"] for s in report["steps"]] == ["compensated", "compensated"]
    assert state.snapshot() == before
    _no_real_value(json.dumps(report))


def test_a_secret_never_follows_a_redirect_to_another_origin(
    up: Undoproxy, redirector: Redirector, tls_upstream: ThreadedServer
) -> None:
    session = _session()
    marker = f"/moved/{uuid.uuid4().hex}"
    base = f"https://127.0.0.1:{redirector.server.port}"
    # The agent follows the redirect itself: the other origin gets the placeholder it sent.
    landed = up.agent(session).get(base + marker, headers={"X-Api-Key": REDIRECT_PLACEHOLDER})
    assert landed.status_code == 200 and landed.url.startswith("https://localhost:")
    assert redirector.seen[-1]["X-Api-Key"] == REDIRECT_REAL
    assert _last(tls_upstream, marker)["X-Api-Key"] == REDIRECT_PLACEHOLDER
    # undoproxy's own snapshot of a write there is answered 302: it is not followed (the
    # write is refused, its snapshot failed), so the other origin never sees undoproxy at all.
    seen = len(received(tls_upstream))
    put = up.agent(session).put(base + marker + "/x", json={"a": 1})
    assert put.status_code == 502 and put.json()["error"] == "undoproxy_snapshot_failed"
    assert redirector.seen[-1]["X-Api-Key"] == REDIRECT_REAL  # the snapshot, with the secret
    assert len(received(tls_upstream)) == seen


def test_uses_are_counted_by_name_in_metrics(up: Undoproxy, tls_upstream: ThreadedServer) -> None:
    assert up.agent(_session()).get(f"{tls_upstream.base_url}/count").ok
    metrics = up.api("GET", "/metrics").text
    line = next(
        ln
        for ln in metrics.splitlines()
        if ln.startswith('undoproxy_secret_uses_total{by="agent",secret="echo"}')
    )
    assert float(line.split()[-1]) >= 1
    assert 'undoproxy_secret_uses_total{by="undoproxy",secret="rest"}' in metrics
    _no_real_value(metrics)
    listed = up.api("GET", "/api/secrets").json()["secrets"]
    assert [s["name"] for s in listed] == ["echo", "rest", "scoped", "redirect"]
    assert listed[0]["uses"]["agent"] >= 1
    _no_real_value(json.dumps(listed))


def test_env_prints_the_placeholders_of_the_session(up: Undoproxy) -> None:
    allowed = json.loads(up.cli("env", "--session", _session("allowed"), "--shell", "json").stdout)
    assert allowed["ECHO_KEY"] == ECHO_PLACEHOLDER
    assert allowed["TEST_REST_KEY"] == "undoproxy-placeholder-test-rest-key"
    assert allowed["SCOPED_KEY"] == SCOPED_PLACEHOLDER
    other = json.loads(up.cli("env", "--session", _session("other"), "--shell", "json").stdout)
    assert other["ECHO_KEY"] == ECHO_PLACEHOLDER
    # Not its secret: no placeholder; the variable the secret is read from is emptied for
    # every agent (one started from undoproxy's own shell must not inherit it).
    assert other["SCOPED_KEY"] == "" and other["REDIRECT_KEY"] == allowed["REDIRECT_KEY"] != ""


def test_doctor_names_a_real_value_in_the_agents_environment(up: Undoproxy) -> None:
    env = {**up.cli_env(), "LEFT_OVER_KEY": REST_REAL, "ECHO_KEY": ECHO_REAL}
    done = up.cli("doctor", "--session", _session(), "--", "true", env=env, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "SECRET  $LEFT_OVER_KEY" in out and "real value of secret rest" in out
    # `env` sets ECHO_KEY to the placeholder: the agent never sees the real one from the shell.
    assert "$ECHO_KEY" not in out
    _no_real_value(out)


def test_rotation_without_restart(
    up: Undoproxy, tls_upstream: ThreadedServer, key_file: Path
) -> None:
    agent = up.agent(_session())
    key_file.write_text(ECHO_ROTATED + "\n")
    assert up.proc is not None
    up.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        assert agent.get(f"{tls_upstream.base_url}/rotated").ok
        if _last(tls_upstream, "/rotated")["Authorization"] == f"Bearer {ECHO_ROTATED}":
            break
        assert time.monotonic() < deadline, "SIGHUP did not reload the secret"
        time.sleep(0.1)
    # A reload that cannot read a value changes nothing, and says why (never a value).
    key_file.unlink()
    failed = up.api("POST", "/api/secrets/reload")
    assert failed.status_code == 409 and "does not exist" in failed.json()["message"]
    assert agent.get(f"{tls_upstream.base_url}/kept").ok
    assert _last(tls_upstream, "/kept")["Authorization"] == f"Bearer {ECHO_ROTATED}"
    key_file.write_text(ECHO_REAL + "\n")
    reloaded = up.api("POST", "/api/secrets/reload")
    assert reloaded.status_code == 200 and reloaded.json()["reloaded"] == 4
    assert agent.get(f"{tls_upstream.base_url}/back").ok
    assert _last(tls_upstream, "/back")["Authorization"] == f"Bearer {ECHO_REAL}"
    _no_real_value("".join(up.output))
