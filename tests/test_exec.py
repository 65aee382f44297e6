"""`undoproxy exec -- CMD`: a real Python agent run in a session through a real undoproxy, against
a real REST API on 127.0.0.2 (loopback, but not in the NO_PROXY `env` prints)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtimes.conftest import need
from tests.support import rest, upstream
from tests.support.certs import server_context
from tests.support.holding import decide, wait_pending
from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer
from undoproxy.client import TOKEN_ENV
from undoproxy.credentials import KEY_ENV
from undoproxy.runtimes.env import WITHHELD

# The agent: requests (trust_env, as any agent) through HTTPS_PROXY from `undoproxy env`.
AGENT = """
import os, sys, requests
base, status = sys.argv[1], int(sys.argv[2])
print("agent sees session", os.environ.get("UNDOPROXY_SESSION"), flush=True)
print("agent sees admin token:", os.environ.get("UNDOPROXY_ADMIN_TOKEN"), flush=True)
requests.get(f"{base}/items/1").raise_for_status()
requests.post(f"{base}/items", json={"name": "Linus"}).raise_for_status()
requests.put(f"{base}/items/1", json={"name": "Ada L."}).raise_for_status()
for extra in sys.argv[3:]:
    requests.post(extra, json={"n": 1}).raise_for_status()
print("agent done", flush=True)
sys.exit(status)
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    hold = {"name": "hold-patches", "match": {"method": "PATCH"}, "action": "hold"}
    instance = Undoproxy(tmp_path_factory.mktemp("exec"), {"rules": [hold]}).start()
    yield instance
    instance.stop()


@pytest.fixture
def state() -> rest.RestState:
    s = rest.RestState()
    s.items = {"1": {"id": "1", "name": "Ada"}}
    return s


@pytest.fixture
def api(state: rest.RestState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = ThreadedServer(
        rest.create_app(state), server_context(upstream_cert), host="127.0.0.2"
    ).start()
    yield server
    server.stop()


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


def test_the_agent_runs_in_the_session_and_its_exit_status_is_exec_s(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, agent: Path, session_id: str
) -> None:
    done = up.cli(
        "exec", "--session", session_id, "--intent", "rename Ada", "--",
        sys.executable, str(agent), api.base_url, "3",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert f"agent sees session {session_id}" in done.stdout
    assert "agent sees admin token: None" in done.stdout  # it could approve its own holds
    assert "agent done" in done.stdout
    assert "undoproxy" not in done.stdout  # exec's own lines are on stderr: stdout is the agent's
    assert f"session {session_id} (open): 3 requests, 2 mutations, 0 held, 0 irreversible" in (
        done.stderr
    )
    assert "Rolling back" not in done.stderr
    assert state.items["1"]["name"] == "Ada L." and len(state.items) == 2  # left as it did it

    shown = up.api("GET", f"/api/sessions/{session_id}").json()
    assert shown["intent"] == "rename Ada"
    assert [(s["method"], s["status"]) for s in shown["steps"]] == [
        ("GET", "succeeded"),
        ("POST", "succeeded"),
        ("PUT", "succeeded"),
    ]


def test_rollback_on_failure_restores_the_upstream_and_prints_the_report(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, agent: Path
) -> None:
    before = state.snapshot()
    done = up.cli(
        "exec", "--intent", "a failing agent", "--rollback-on-failure", "--",
        sys.executable, str(agent), api.base_url, "3",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert state.items == before  # created item gone, renamed one back

    session = done.stdout.split("agent sees session ", 1)[1].split()[0]
    assert f"undoproxy exec: session {session}" in done.stderr  # a fresh id, printed first
    assert "3 requests, 2 mutations, 0 held, 0 irreversible" in done.stderr
    assert f"Rolling back session {session}, newest step first:" in done.stderr
    assert "[ok] #3 PUT" in done.stderr and "[ok] #2 POST" in done.stderr
    assert f"session {session}: rolled_back (2 compensated)" in done.stderr
    shown = up.api("GET", f"/api/sessions/{session}").json()
    assert shown["state"] == "rolled_back" and shown["intent"] == "a failing agent"


def test_a_successful_agent_is_not_rolled_back(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, agent: Path, session_id: str
) -> None:
    done = up.cli(
        "exec", "--session", session_id, "--rollback-on-failure", "--",
        sys.executable, str(agent), api.base_url, "0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Rolling back" not in done.stderr
    assert len(state.items) == 2
    assert up.api("GET", f"/api/sessions/{session_id}").json()["state"] == "open"


def test_a_node_agent_fails_and_is_rolled_back(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, tmp_path: Path
) -> None:
    node = need("node")
    before = state.snapshot()
    script = tmp_path / "agent.mjs"
    script.write_text(
        "const base = process.argv[2];\n"
        "const headers = {'content-type': 'application/json'};\n"
        "let r = await fetch(`${base}/items`, {method: 'POST', headers, body: '{\"n\": 1}'});\n"
        "if (r.status !== 201) throw new Error(`POST ${r.status}`);\n"
        "r = await fetch(`${base}/items/1`, {method: 'DELETE'});\n"
        "console.log('node agent deleted', r.status);\n"
        "process.exit(2);\n"
    )
    done = up.cli(
        "exec", "--rollback-on-failure", "--", node, str(script), api.base_url
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stdout == "node agent deleted 204\n"
    assert "2 requests, 2 mutations, 0 held, 0 irreversible" in done.stderr
    assert "rolled_back (2 compensated)" in done.stderr
    assert state.items == before


def test_the_summary_counts_what_cannot_be_undone(
    up: Undoproxy,
    api: ThreadedServer,
    agent: Path,
    session_id: str,
    upstream_cert: tuple[Path, Path],
) -> None:
    # The echo upstream answers a POST without naming what it created: irreversible.
    echo = ThreadedServer(
        upstream.create_app(), server_context(upstream_cert), host="127.0.0.2"
    ).start()
    try:
        done = up.cli(
            "exec", "--session", session_id, "--",
            sys.executable, str(agent), api.base_url, "0", f"{echo.base_url}/things",
        )  # fmt: skip
    finally:
        echo.stop()
    assert done.returncode == 0, done.stderr
    assert "4 requests, 3 mutations, 0 held, 1 irreversible" in done.stderr


def test_the_summary_counts_held_requests(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    code = (
        "import sys, requests\n"
        f"r = requests.patch('{api.base_url}/items/1', json={{'tier': 'gold'}})\n"
        "print('agent got', r.status_code, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "undoproxy", "exec", "--session", session_id, "--",
         sys.executable, "-c", code],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=up.cli_env(),
    )  # fmt: skip
    try:
        approval = wait_pending(up, session_id, timeout=30)
        assert decide(up, approval["id"], "approve").status_code == 200
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == "agent got 200\n" and state.items["1"]["tier"] == "gold"
    assert f"session {session_id} (open): 1 request, 1 mutation, 1 held" in err


def test_stdin_and_stdout_pass_through(up: Undoproxy, session_id: str) -> None:
    code = "import sys; data = sys.stdin.read(); print(data.upper(), end='')"
    done = subprocess.run(
        [sys.executable, "-m", "undoproxy", "exec", "--session", session_id, "--",
         sys.executable, "-c", code],
        input="hello agent\n", capture_output=True, text=True, env=up.cli_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "HELLO AGENT\n"
    assert "0 requests, 0 mutations" in done.stderr


def test_an_interrupt_reaches_the_agent_and_its_status_is_kept(
    up: Undoproxy, session_id: str
) -> None:
    code = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('agent interrupted', flush=True); sys.exit(7)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "undoproxy", "exec", "--session", session_id, "--",
         sys.executable, "-c", code],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=up.cli_env(),
        start_new_session=True,  # no terminal: the SIGINT comes to undoproxy alone
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 7, err
    assert out == "agent interrupted\n"
    assert f"session {session_id} (open): 0 requests" in err and "Traceback" not in err


def test_the_agent_s_status_is_kept_when_undoproxy_is_gone_after_it(tmp_path: Path) -> None:
    lone = Undoproxy(tmp_path / "lone").start()
    assert lone.proc is not None
    code = (  # stop undoproxy, and end once its admin port refuses connections
        "import os, signal, socket, time\n"
        f"os.kill({lone.proc.pid}, signal.SIGTERM)\n"
        "while True:\n"
        "    try:\n"
        f"        socket.create_connection(('127.0.0.1', {lone.admin_port}), 1).close()\n"
        "    except OSError:\n"
        "        raise SystemExit(4)\n"
        "    time.sleep(0.05)\n"
    )
    try:
        done = lone.cli("exec", "--", sys.executable, "-c", code)
        lone.proc.wait(30)
    finally:
        lone.stop()
    assert done.returncode == 4
    assert "undoproxy is not running" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to run"),
        (["--", "no-such-agent-binary-x"], "command not found: no-such-agent-binary-x"),
    ],
)
def test_mistakes_are_clear(up: Undoproxy, args: list[str], message: str) -> None:
    done = up.cli("exec", *args)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_closed_session_is_refused(up: Undoproxy, session_id: str) -> None:
    up.api("POST", "/api/sessions", json={"id": session_id})
    up.api("POST", f"/api/sessions/{session_id}/commit")
    done = up.cli("exec", "--session", session_id, "--", sys.executable, "-c", "print('ran')")
    assert done.returncode == 1
    assert f"session {session_id} is committed" in done.stderr and "ran" not in done.stdout


def test_exec_is_in_help() -> None:
    done = run_cli("exec", "--help")
    assert done.returncode == 0
    assert "--rollback-on-failure" in done.stdout and "--intent" in done.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["exec", "--"],
        # The canary on loopback: this command never calls it, and nothing leaves the machine.
        ["doctor", "--canary-host", "127.0.0.1", "--"],
    ],
    ids=["exec", "doctor"],
)
def test_the_agent_gets_neither_the_admin_token_nor_the_credentials_key(
    up: Undoproxy, tmp_path: Path, session_id: str, command: list[str]
) -> None:
    seen = tmp_path / "env.json"
    dump = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"
    key = "k" * 43 + "="
    env = {**up.cli_env(), "UNDOPROXY_CREDENTIALS_KEY": key}
    name, *rest = command
    done = up.cli(
        name, "--session", session_id, *rest, sys.executable, "-c", dump, str(seen), env=env
    )
    assert seen.exists(), done.stdout + done.stderr
    agent_env = json.loads(seen.read_text())
    assert agent_env["UNDOPROXY_SESSION"] == session_id  # it did get `undoproxy env`'s
    assert "UNDOPROXY_ADMIN_TOKEN" not in agent_env and "UNDOPROXY_CREDENTIALS_KEY" not in agent_env
    assert up.token not in seen.read_text() and key not in seen.read_text()


def test_the_withheld_names_are_the_ones_undoproxy_reads() -> None:
    assert set(WITHHELD) == {TOKEN_ENV, KEY_ENV}
