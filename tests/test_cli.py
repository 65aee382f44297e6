"""The command line against a real running undoproxy."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer


def test_env_then_curl_and_requests_go_through_undoproxy(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    env = proxy.cli("env", "--session", session_id)
    assert env.returncode == 0, env.stderr
    names = {line.split("=", 1)[0].removeprefix("export ") for line in env.stdout.splitlines()}
    assert {
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "CURL_CA_BUNDLE",
        "NODE_USE_ENV_PROXY",
    } <= names
    url = f"{tls_upstream.base_url}/echo/from-env"
    script = (
        f'eval "$({sys.executable} -m undoproxy env --session {session_id})"\n'
        "unset NO_PROXY no_proxy\n"
        f"curl -sS --fail {url}?by=curl >/dev/null\n"
        f'{sys.executable} -c \'import requests; requests.get("{url}?by=requests")'
        ".raise_for_status()'\n"
    )
    run = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=proxy.cli_env(), timeout=60
    )
    assert run.returncode == 0, run.stderr
    show = proxy.cli("show", session_id)
    assert show.returncode == 0, show.stderr
    assert "from-env?by=curl" in show.stdout and "from-env?by=requests" in show.stdout


def test_env_bundle_keeps_the_system_cas(proxy: Undoproxy) -> None:
    bundle = Path(proxy.ca_bundle).read_text()
    assert bundle.count("BEGIN CERTIFICATE") > 10  # system CAs plus undoproxy's own
    assert (proxy.state_dir / "mitmproxy-ca-cert.pem").read_text().strip() in bundle


def test_sessions_show_export_commit(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    with proxy.agent(session_id) as s:
        s.post(
            f"{plain_upstream.base_url}/echo/things",
            json={"n": 1},
            headers={"Authorization": "Bearer TOPSECRET"},
        ).raise_for_status()
    listed = proxy.cli("sessions")
    assert listed.returncode == 0
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith(session_id))
    assert line.split()[1:4] == ["open", "1", "1"]

    show = proxy.cli("show", session_id)
    assert "POST" in show.stdout and "/echo/things" in show.stdout and "succeeded" in show.stdout

    export = proxy.cli("export", session_id, "--format", "jsonl")
    assert export.returncode == 0
    [row] = [json.loads(line) for line in export.stdout.splitlines()]
    assert row["method"] == "POST" and row["seq"] == 1
    assert "TOPSECRET" not in export.stdout
    har = json.loads(proxy.cli("export", session_id, "--format", "har").stdout)
    assert har["log"]["entries"][0]["request"]["method"] == "POST"
    assert "TOPSECRET" not in json.dumps(har)

    assert proxy.cli("commit", session_id).stdout.strip() == f"session {session_id} is committed"
    committed = proxy.cli("sessions", "--state", "committed").stdout
    assert session_id in committed


def test_wrong_token_and_not_running_are_clear(proxy: Undoproxy) -> None:
    wrong = proxy.cli("sessions", env={**proxy.cli_env(), "UNDOPROXY_ADMIN_TOKEN": "nope"})
    assert wrong.returncode == 1
    assert "admin token was refused" in wrong.stderr and "Traceback" not in wrong.stderr

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    down = proxy.cli(
        "sessions", env={**proxy.cli_env(), "UNDOPROXY_ADMIN": f"http://127.0.0.1:{free}"}
    )
    assert down.returncode == 1
    assert "not running" in down.stderr and "Traceback" not in down.stderr


def test_unknown_session_is_a_clear_error(proxy: Undoproxy) -> None:
    r = proxy.cli("show", "no-such-session")
    assert r.returncode == 1 and "no session 'no-such-session'" in r.stderr


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        instance = Undoproxy(tmp_path, {"proxy": {"listen": f"127.0.0.1:{port}"}})
        with pytest.raises(RuntimeError) as failed:
            instance.start(timeout=30)
    assert f"cannot listen for agents on 127.0.0.1:{port}" in str(failed.value)
    assert instance.proc is not None and instance.proc.wait(10) == 1


def test_help_lists_every_command() -> None:
    out = run_cli("--help").stdout
    for command in ("run", "env", "sessions", "show", "commit", "export", "rules"):
        assert command in out


def test_rules_check_lists_every_mistake_with_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "rules:\n"
        "  - name: a\n"
        "    match: {method: FETCH}\n"
        "  - name: b\n"
        "    acton: deny\n"
        "    compensate: undo-everything\n"
    )
    r = run_cli("rules", "check", "-c", str(config))
    assert r.returncode == 2
    assert f"{config}:3: " in r.stderr and "FETCH" in r.stderr
    assert f"{config}:5: " in r.stderr and "did you mean 'action'" in r.stderr
    assert f"{config}:6: " in r.stderr and "undo-everything" in r.stderr
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "undoproxy",
            "rules",
            "check",
            "-c",
            str(Path(__file__).parent.parent / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "OK, 4 rules" in ok.stdout


def test_rules_explain_shows_the_match_its_captures_and_why_others_did_not(tmp_path: Path) -> None:
    example = Path(__file__).parent.parent / "config.yaml"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "undoproxy",
            "rules",
            "explain",
            "-c",
            str(example),
            "DELETE",
            "https://api.github.com/repos/acme/web",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "Matched: never-delete-repos" in r.stdout
    assert "owner=acme, repo=web" in r.stdout
    assert "method DELETE is not POST" in r.stdout  # why the first rule did not match
