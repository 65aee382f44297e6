"""The README's quick start in one shell, as a new user pastes it: eval `undoproxy env`, make
calls, then `show` and `rollback` from the same shell. The CLI's own admin calls must not go
through the proxy (they would become steps of the session, and the rollback would try to undo
itself)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import rest
from tests.support.certs import server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


def test_the_quick_start_in_one_shell_ends_rolled_back(
    proxy: Undoproxy, upstream_cert: tuple[object, object], session_id: str
) -> None:
    # 127.0.0.2 is loopback too, but not in the NO_PROXY that `env` prints: the agent's calls
    # go through undoproxy as calls to a remote API would.
    state = rest.RestState()
    api = ThreadedServer(
        rest.create_app(state),
        server_context(upstream_cert),
        host="127.0.0.2",  # type: ignore[arg-type]
    ).start()
    try:
        cli = f"{sys.executable} -m undoproxy"
        post = f"{api.base_url}/items"
        script = f"""
set -e
eval "$({cli} env --session {session_id})"
curl -sS --fail {api.base_url}/items/none -o /dev/null -w '%{{http_code}}\\n' || true
{sys.executable} -c 'import requests; requests.post("{post}", json={{"a": 1}}).raise_for_status()'
{cli} show {session_id}
{cli} rollback {session_id}
"""
        run = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, env=proxy.cli_env(), timeout=120
        )
    finally:
        api.stop()
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"session {session_id}: rolled_back" in run.stdout
    assert state.items == {}  # what the agent created is gone
    # Only the agent's two calls are steps: none of the CLI's admin calls went through.
    steps = proxy.api("GET", f"/api/sessions/{session_id}").json()["steps"]
    assert [(s["method"], s["url"].split("/", 3)[-1]) for s in steps] == [
        ("GET", "items/none"),
        ("POST", "items"),
    ]


def test_the_quick_start_pasted_again_is_told_the_session_is_closed(
    proxy: Undoproxy, upstream_cert: tuple[object, object], session_id: str
) -> None:
    """The second paste of the same quick start: `env` warns on stderr that the session is
    rolled back and names a fresh one; the agent's write is refused with 409 saying why and
    what to do; nothing reaches the API. (tests/test_doc_examples.py runs the README's own
    block, literally.)"""
    state = rest.RestState()
    api = ThreadedServer(
        rest.create_app(state),
        server_context(upstream_cert),
        host="127.0.0.2",  # type: ignore[arg-type]
    ).start()
    cli = f"{sys.executable} -m undoproxy"
    agent = (
        "import requests, sys; r = requests.post(sys.argv[1], json={'a': 1}); "
        "print(r.status_code, r.json().get('error'), r.json().get('fix'))"
    )
    script = f"""
set -e
eval "$({cli} env --session {session_id})"
{sys.executable} -c "{agent}" {api.base_url}/items
{cli} rollback {session_id}
"""
    try:
        runs = [
            subprocess.run(
                ["bash", "-c", script],
                capture_output=True,
                text=True,
                env=proxy.cli_env(),
                timeout=120,
            )
            for _ in range(2)
        ]
    finally:
        api.stop()
    first, second = runs
    assert first.returncode == 0 and "201 None None" in first.stdout, first.stdout + first.stderr
    assert first.stderr.count("warning") == 0
    assert f"session {session_id} is rolled_back" in second.stderr
    assert f"--session {session_id}-2" in second.stderr
    assert "409 undoproxy_session_closed start the agent in a new session" in second.stdout
    assert state.log.count(("POST", "/items")) == 1  # the refused write never left
