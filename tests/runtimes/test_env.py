"""`undoproxy env`: every shell format says the same thing, the JVM truststore is sound, and
a session's own port puts every connection in that session, behind the same rules and guard
and across a restart; it refuses requests that name another session, and in token mode wants
the session's own credentials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.runtimes.conftest import agent_env, need, received
from tests.support import upstream
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.runtimes import truststore
from undoproxy.runtimes.env import SHELLS, Setup, render, variables

SETUP = Setup(
    proxy_url="http://s1:t0k'en@127.0.0.1:8080",
    ca_cert=Path("/state dir/mitmproxy-ca-cert.pem"),
    ca_bundle=Path("/state dir/ca-bundle.pem"),
    no_proxy=("127.0.0.1", "localhost"),
    session="s1",
    session_port=("127.0.0.1", 40001),
)


def test_sh_output_evals_to_exactly_the_values() -> None:
    values = dict(variables(SETUP))
    script = render(variables(SETUP), "sh") + "\nenv -0"
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env={})
    seen = dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    assert {k: seen[k] for k in values} == values
    assert "-Dhttps.proxyPort=40001" in values["JAVA_TOOL_OPTIONS"]  # the session's own port
    assert values["UNDOPROXY_SESSION_PROXY"] == "http://127.0.0.1:40001"


@pytest.mark.parametrize(
    ("shell", "line"),
    [
        ("fish", "set -gx HTTPS_PROXY 'http://s1:t0k\\'en@127.0.0.1:8080'"),
        ("powershell", "$env:HTTPS_PROXY = 'http://s1:t0k''en@127.0.0.1:8080'"),
        ("dotenv", 'HTTPS_PROXY="http://s1:t0k\'en@127.0.0.1:8080"'),
        ("sh", "export HTTPS_PROXY='http://s1:t0k'\"'\"'en@127.0.0.1:8080'"),
    ],
)
def test_each_shell_quotes_its_own_way(shell: str, line: str) -> None:
    assert line in render(variables(SETUP), shell).splitlines()


def test_json_and_every_shell_name_the_same_variables() -> None:
    names = [k for k, _ in variables(SETUP)]
    assert list(json.loads(render(variables(SETUP), "json"))) == names
    for shell in SHELLS:
        assert len(render(variables(SETUP), shell).splitlines()) >= len(names)


def test_the_truststore_holds_every_certificate_of_the_bundle_with_a_valid_mac(
    rt_proxy: Undoproxy,
) -> None:
    bundle = Path(rt_proxy.ca_bundle).read_bytes()
    data = (rt_proxy.state_dir / "truststore.p12").read_bytes()
    loaded = pkcs12.load_pkcs12(data, truststore.PASSWORD.encode())  # checks the MAC
    assert len(loaded.additional_certs) == bundle.count(b"BEGIN CERTIFICATE") > 10
    with pytest.raises(ValueError):
        pkcs12.load_pkcs12(data, b"wrong password")


def test_env_without_a_session_and_the_cli_itself_never_proxied(rt_proxy: Undoproxy) -> None:
    run = rt_proxy.cli("env", "--shell", "json")
    assert run.returncode == 0, run.stderr
    values = json.loads(run.stdout)
    assert "UNDOPROXY_SESSION_PROXY" not in values
    assert values["HTTPS_PROXY"] == rt_proxy.proxy_url()
    for name in ("WGETRC", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"):
        assert Path(values[name]).is_file(), name
    assert Path(values["PHP_INI_SCAN_DIR"].lstrip(":"), "undoproxy.ini").is_file()


def _curl(
    port: int, url: str, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--proxy",
            f"http://127.0.0.1:{port}",
            "--cacert",
            env["SSL_CERT_FILE"],
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_session_port_in_token_mode_wants_the_session_s_credentials_across_restarts(
    tmp_path: Path, api_upstream: ThreadedServer
) -> None:
    """In token mode a port is not a credential (any local process can connect to it): the
    session's own port wants that session's token as proxy credentials, like the main port,
    and refuses another session's."""
    config = {
        "proxy": {"auth": "token"},
        "rules": [
            {
                "name": "no-deletes",
                "match": {"host": "127.0.0.2", "method": "DELETE"},
                "action": "deny",
            },
        ],
    }
    proxy = Undoproxy(tmp_path, config).start()
    try:
        env = agent_env(proxy, "javaish")
        port = int(env["UNDOPROXY_SESSION_PROXY"].rsplit(":", 1)[1])
        assert agent_env(proxy, "javaish")["UNDOPROXY_SESSION_PROXY"].endswith(f":{port}")
        own = env["HTTPS_PROXY"].split("//", 1)[1].rsplit("@", 1)[0]  # javaish:TOKEN
        other_token = proxy.api("POST", "/api/sessions", json={"id": "other"}).json()["token"]
        url = f"{api_upstream.base_url}/echo/by-port"
        # No credentials: refused on the main port and on the session's own port alike.
        for no_creds in (proxy.proxy_port, port):
            refused = _curl(no_creds, url + "?none", env)
            assert "407" in refused.stdout + refused.stderr
        wrong = _curl(port, url + "?wrong", env, "--proxy-user", "javaish:nope")
        assert "407" in wrong.stdout + wrong.stderr
        # Another session's valid credentials: refused, filed under neither session.
        other = _curl(port, url + "?other", env, "--proxy-user", f"other:{other_token}")
        assert "403" in other.stdout + other.stderr
        assert _curl(port, url, env, "--proxy-user", own).stdout == "200"
        # The same rules apply: a denied request is refused and never forwarded.
        denied = _curl(port, url + "-delete", env, "--proxy-user", own, "-X", "DELETE")
        assert denied.stdout == "403"
        seen = [
            (s["method"], s["url"].split("/echo/", 1)[1], s["status"])
            for s in proxy.steps("javaish")
        ]
        assert seen == [("GET", "by-port", "succeeded"), ("DELETE", "by-port-delete", "denied")]
        assert proxy.steps("other") == []
        assert proxy.stop() == 0
        proxy.output = []  # new ephemeral admin and proxy ports: read the new banner
        proxy.start()  # the session's port is reopened for the same session
        assert _curl(port, url + "?again", env, "--proxy-user", own).stdout == "200"
        assert proxy.steps("javaish")[-1]["url"].endswith("by-port?again")
    finally:
        proxy.stop()
    assert os.path.exists(tmp_path / "state" / "session-ports.json")


@pytest.fixture(scope="module")
def plain_api_upstream() -> Iterator[ThreadedServer]:
    """The echo upstream on 127.0.0.2, plain HTTP: proxy credentials on every request."""
    server = ThreadedServer(upstream.create_app(), host="127.0.0.2").start()
    yield server
    server.stop()


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_session_port_refuses_requests_that_name_another_session(
    rt_proxy: Undoproxy,
    api_upstream: ThreadedServer,
    plain_api_upstream: ThreadedServer,
    scheme: str,
) -> None:
    """Open mode: the port is the session, and credentials (or the session header) naming
    another one are refused 403 undoproxy_wrong_session, not filed under the port's session:
    a frozen session's agent cannot slip past its kill switch through another session's
    port."""
    suffix = uuid.uuid4().hex[:8]
    frozen, carrier = f"frozen-{suffix}", f"carrier-{suffix}"
    env = agent_env(rt_proxy, carrier)
    port = int(env["UNDOPROXY_SESSION_PROXY"].rsplit(":", 1)[1])
    rt_proxy.api("POST", "/api/sessions", json={"id": frozen})
    assert rt_proxy.api("POST", f"/api/sessions/{frozen}/freeze").status_code == 200
    base = (api_upstream if scheme == "https" else plain_api_upstream).base_url
    url = f"{base}/echo/slip-{suffix}"
    before = len(received(api_upstream)) + len(received(plain_api_upstream))
    as_frozen = _curl(port, url, env, "--proxy-user", f"{frozen}:x", "-X", "POST")
    by_header = _curl(port, url, env, "-H", f"X-Undoproxy-Session: {frozen}", "-X", "POST")
    for refused in (as_frozen, by_header):
        assert "403" in refused.stdout + refused.stderr
    if scheme == "http":  # a plain request gets the JSON answer itself
        body = subprocess.run(
            ["curl", "-sS", "--proxy", f"http://{frozen}:x@127.0.0.1:{port}", url, "-X", "POST"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        assert json.loads(body)["error"] == "undoproxy_wrong_session"
    after = received(api_upstream) + received(plain_api_upstream)
    assert len(after) == before
    assert rt_proxy.steps(carrier) == [] and rt_proxy.steps(frozen) == []
    # Its own name (or none) is the port's session, as always.
    assert _curl(port, url, env, "--proxy-user", f"{carrier}:x").stdout == "200"
    assert [s["method"] for s in rt_proxy.steps(carrier)] == ["GET"]


def test_every_start_says_where_the_token_is_and_names_the_cli_as_run(tmp_path: Path) -> None:
    def banner() -> str:  # start() returns at the address lines: wait for the last line
        deadline = time.monotonic() + 30
        while "Agents:" not in "".join(proxy.output) and time.monotonic() < deadline:
            time.sleep(0.02)
        return "".join(proxy.output)

    proxy = Undoproxy(tmp_path).start()
    try:
        first = banner()
        assert proxy.stop() == 0
        proxy.output = []
        proxy.start()
        again = banner()
    finally:
        proxy.stop()
    kept = str(tmp_path / "state" / "admin-token")
    assert "(generated; kept in " + kept in first
    assert f"token    kept in {kept}" in again
    # Started as `python -m undoproxy`: that is how the banner tells to run the CLI.
    # Started as `python -m undoproxy -c FILE`: that is how the banner tells to run the CLI,
    # with the same config, through which the CLI finds this instance and its token.
    config = proxy.config_path
    assert f'eval "$({sys.executable} -m undoproxy env -c {config} --session NAME)"' in again
    assert f"Check: {sys.executable} -m undoproxy doctor -c {config}" in again
    assert f"{tmp_path}/journal.db" in again


@pytest.mark.parametrize(
    ("argv0", "on_path", "shown"),
    [
        (".venv/bin/undoproxy", None, ".venv/bin/undoproxy"),
        (".venv/bin/undoproxy", ".venv/bin/undoproxy", "undoproxy"),
    ],
)
def test_the_banner_names_the_cli_by_its_real_path(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv0: str,
    on_path: str | None,
    shown: str,
) -> None:
    from undoproxy import server

    script = tmp_path / argv0
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.setattr(server.shutil, "which", lambda name: on_path and str(tmp_path / on_path))
    assert server.cli_command() == shown


def test_node_fetch_preload_leaves_no_proxy_hosts_direct(
    rt_proxy: Undoproxy, session_id: str
) -> None:
    need("node")
    env = agent_env(rt_proxy, session_id)
    script = "fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 2))"
    done = subprocess.run(
        ["node", "-e", script, rt_proxy.admin_url + "/ca.pem"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not [s for s in rt_proxy.steps(session_id) if "ca.pem" in s["url"]]


def test_no_proxy_never_lets_ruby_skip_hosts_ending_in_dot_1(rt_proxy: Undoproxy) -> None:
    """Ruby's no_proxy parser turns an entry "::1" into "1", which matches 10.0.0.1: every
    such host would go around undoproxy. `env` must print nothing Ruby misreads."""
    need("ruby")
    env = agent_env(rt_proxy, "ruby-no-proxy")
    assert "::1" not in env["NO_PROXY"]
    run = subprocess.run(
        ["ruby", "-ruri", "-e", "p URI('https://10.0.0.1/x').find_proxy"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert "http://" in run.stdout  # a proxy is used, not nil
