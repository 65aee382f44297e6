"""What a new user meets first, against a real undoproxy: the banner's agent line works as
printed (other ports, another state_dir), a closed or frozen session is never handed out
silently, `show` gives each step's id, kind and reason, and Ctrl-C or a closed pipe ends a
command with one calm line at most."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import rest
from tests.support.holding import until
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith("UNDOPROXY_") and k.upper() not in ("HTTPS_PROXY", "HTTP_PROXY")
}


def _agent_line(instance: Undoproxy) -> str:
    """The command inside the banner's `Agents: eval "$(...)"`, with NAME still in it."""
    banner = "".join(instance.output)
    found = re.search(r'Agents: eval "\$\((.+?)\)"', banner)
    assert found, banner
    return found.group(1)


def test_the_banners_agent_line_works_as_printed_on_other_ports_and_state_dir(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    """The test instance listens on ephemeral ports with its own state_dir: the banner's line
    names its config, and in a shell that knows nothing else (no UNDOPROXY_* variables) the
    line finds the instance and its token through that config's state_dir."""
    line = _agent_line(proxy)
    assert f"-c {proxy.config_path}" in line
    script = f"""
set -e
eval "$({line.replace("NAME", session_id)})"
unset NO_PROXY no_proxy  # the test upstream is on loopback, which env leaves out of the proxy
curl -sS --fail {plain_upstream.base_url}/echo/banner-line -o /dev/null
{line.replace(" env ", " show ").replace("--session NAME", session_id)}
"""
    run = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=CLEAN_ENV, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "/echo/banner-line" in run.stdout
    assert [s["url"].rsplit("/", 1)[-1] for s in proxy.steps(session_id)] == ["banner-line"]


def test_the_cli_finds_a_running_instance_through_its_state_dir(
    proxy: Undoproxy, session_id: str
) -> None:
    """Without a config: UNDOPROXY_STATE_DIR (default ~/.undoproxy) holds the running
    undoproxy's admin URL and token."""
    assert (proxy.state_dir / "admin-url").read_text().strip() == proxy.admin_url
    env = {**CLEAN_ENV, "UNDOPROXY_STATE_DIR": str(proxy.state_dir)}
    done = proxy.cli("env", "--session", session_id, env=env)
    assert done.returncode == 0, done.stderr
    assert f"127.0.0.1:{proxy.proxy_port}" in done.stdout


def test_the_admin_url_file_goes_when_undoproxy_stops(tmp_path: Path) -> None:
    instance = Undoproxy(tmp_path).start()
    pointer = instance.state_dir / "admin-url"
    assert pointer.read_text().strip() == instance.admin_url
    assert instance.stop() == 0
    assert not pointer.exists()
    done = instance.cli("sessions", "-c", str(instance.config_path), env=CLEAN_ENV)
    assert done.returncode == 1
    assert "undoproxy is not running" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("close", ["commit", "rollback", "freeze"])
def test_env_warns_when_the_session_takes_no_mutations(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str, close: str
) -> None:
    """`env` still prints the environment (an agent started this way stays on undoproxy:
    refused, never unjournaled) and says on stderr why its writes will fail and what to do;
    the agent's refusal says the same."""
    session_id += "-demo"  # the suggested name is demo-2 (an id ending -<digits> counts on)
    proxy.api("POST", "/api/sessions", json={"id": session_id})
    assert proxy.api("POST", f"/api/sessions/{session_id}/{close}", json={}).ok
    done = proxy.cli("env", "--session", session_id)
    assert done.returncode == 0
    assert "HTTPS_PROXY=" in done.stdout
    [warning] = done.stderr.splitlines()
    if close == "freeze":
        assert f"session {session_id} is frozen" in warning
        assert f"undoproxy unfreeze {session_id}" in warning
    else:
        state = "committed" if close == "commit" else "rolled_back"
        assert f"session {session_id} is {state}" in warning
        assert f"--session {session_id}-2" in warning
    with proxy.agent(session_id) as agent:
        refused = agent.post(f"{plain_upstream.base_url}/echo/closed", json={})
        assert agent.get(f"{plain_upstream.base_url}/echo/closed").status_code == 200
    body = refused.json()
    if close == "freeze":
        assert (refused.status_code, body["error"]) == (403, "undoproxy_frozen")
        assert f"undoproxy unfreeze {session_id}" in body["fix"]
    else:
        assert (refused.status_code, body["error"]) == (409, "undoproxy_session_closed")
        assert "reads still pass" in body["message"]
        assert "undoproxy env --session" in body["fix"]


def test_env_is_silent_for_an_open_session(proxy: Undoproxy, session_id: str) -> None:
    done = proxy.cli("env", "--session", session_id)
    assert done.returncode == 0 and done.stderr == ""


def test_show_gives_each_steps_id_kind_and_why(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    with proxy.agent(session_id) as agent:
        agent.get(f"{plain_upstream.base_url}/echo/read")
        agent.post(f"{plain_upstream.base_url}/echo/refused?status=422", json={})
    proxy.api("POST", f"/api/sessions/{session_id}/commit")
    with proxy.agent(session_id) as agent:
        agent.delete(f"{plain_upstream.base_url}/echo/after-commit")
    steps = proxy.steps(session_id)
    shown = proxy.cli("show", session_id)
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()[1:5]
    assert header.split()[:5] == ["#", "STEP", "TIME", "KIND", "METHOD"]
    assert header.split()[-1] == "WHY"
    for step, row in zip(steps, rows, strict=True):
        assert row.split()[:2] == [str(step["seq"]), step["id"]]
        assert row.split()[3] == step["kind"]
    assert rows[0].split()[3:5] == ["read", "GET"]
    assert rows[1].rstrip().endswith("the upstream answered 422")
    # The refusal the agent got, in undoproxy's words, from the journal.
    assert f"session '{session_id}' is committed" in rows[2]
    assert rows[2].rstrip().endswith("…")  # cut at show.WHY_WIDTH characters
    wide = proxy.cli("show", session_id, "--wide").stdout
    assert "reads still pass (undoproxy_session_closed)" in wide


def test_ctrl_c_on_rollback_stops_the_watching_only_and_calmly(
    tmp_path: Path, upstream_cert: tuple[Path, Path], session_id: str
) -> None:
    """SIGINT while the rollback waits on a slow upstream: the CLI says one line and exits
    130; undoproxy finishes the rollback and logs no error for the client that left."""
    state = rest.RestState()
    api = ThreadedServer(rest.create_app(state)).start()
    instance = Undoproxy(tmp_path).start()
    try:
        with instance.agent(session_id) as agent:
            agent.post(f"{api.base_url}/items", json={"a": 1}).raise_for_status()
        gate = asyncio.Event()
        state.gate = gate
        watching = subprocess.Popen(
            [sys.executable, "-m", "undoproxy", "rollback", session_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=instance.cli_env(),
        )
        until(lambda: ("DELETE", "/items/100") in state.log, what="the compensation is sent")
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=30)
        assert watching.returncode == 130
        assert err.splitlines() == [
            f"stopped watching; the rollback of {session_id} goes on in undoproxy: "
            f"see `undoproxy show {session_id}`"
        ]
        api.call(gate.set)
        until(
            lambda: (
                instance.api("GET", f"/api/sessions/{session_id}").json()["state"] == "rolled_back"
            ),
            what="the rollback finishes inside undoproxy",
        )
        assert state.items == {}
    finally:
        instance.stop()
        api.stop()
    log = "".join(instance.output)
    assert "Traceback" not in log and " ERROR " not in log, log


def test_a_closed_pipe_ends_a_command_quietly(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    with proxy.agent(session_id) as agent:
        for n in range(40):
            agent.get(f"{plain_upstream.base_url}/echo/{n}")
    env = proxy.cli_env()
    for command in (f"show {session_id}", f"export {session_id}", "sessions"):
        run = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m undoproxy {command} | head -1; "
             "echo status=${PIPESTATUS[0]}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )  # fmt: skip
        assert len(run.stdout.splitlines()) == 2, run.stdout
        assert run.stderr == "", run.stderr  # no traceback, no "Exception ignored"
        assert run.stdout.splitlines()[1] in ("status=0", "status=141")


def test_ctrl_c_inside_any_command_is_one_line() -> None:
    """A KeyboardInterrupt wherever a command is: one line on stderr, exit 130."""
    code = (
        "import sys, undoproxy.cli as cli, undoproxy.cli.rules as rules\n"
        "def interrupted(args): raise KeyboardInterrupt\n"
        "rules.cmd_packs = interrupted\n"
        "sys.exit(cli.main(['packs']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130
    assert done.stderr == "undoproxy: interrupted\n"


@pytest.mark.parametrize(
    ("name", "suggested"), [("demo", "demo-2"), ("demo-2", "demo-3"), ("a-b", "a-b-2")]
)
def test_env_suggests_the_next_free_looking_name(name: str, suggested: str) -> None:
    from undoproxy.cli.agents import closed_warning

    warning = closed_warning({"id": name, "state": "rolled_back"}, frozen_all=False)
    assert warning is not None and warning.endswith(f"--session {suggested}")
