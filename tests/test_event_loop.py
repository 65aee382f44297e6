"""`undoproxy run` serves on uvloop, or on asyncio's loop when UNDOPROXY_EVENT_LOOP says so,
and proxies, journals and rolls back the same on either."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.conftest import received
from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer

RULES = {
    "rules": [
        {
            "name": "create-item",
            "match": {"host": "127.0.0.1", "method": "POST", "path": "/items"},
            "compensate": "delete-created",
        }
    ]
}


@pytest.mark.parametrize("choice, loop", [(None, "uvloop"), ("asyncio", "asyncio")])
def test_the_loop_serves_a_mutation_journaled_and_rolled_back(
    tmp_path: Path, tls_upstream: ThreadedServer, choice: str | None, loop: str
) -> None:
    env = {"UNDOPROXY_EVENT_LOOP": choice} if choice else {}
    up = Undoproxy(tmp_path, RULES, env=env).start()
    session = f"loop-{uuid.uuid4().hex[:8]}"
    try:
        assert up.api("GET", "/api/info").json()["event_loop"] == loop
        r = up.agent(session).post(f"{tls_upstream.base_url}/items", json={"n": 1}, timeout=30)
        assert r.status_code == 200, r.text
        steps = up.steps(session)
        assert [(s["method"], s["status"]) for s in steps] == [("POST", "succeeded")]
        report = up.api("POST", f"/api/sessions/{session}/rollback").json()
        assert report["state"] in ("rolled_back", "rollback_incomplete"), report
        assert len(report["steps"]) == 1
    finally:
        assert up.stop() == 0  # the agent's keep-alive connection is still open
    assert any(x.method == "POST" and x.path == "/items" for x in received(tls_upstream))
    # Stopping with agent connections open is routine: no error, no traceback.
    assert "Traceback" not in "".join(up.output), "".join(up.output)
    assert " ERROR " not in "".join(up.output), "".join(up.output)


def test_an_unknown_loop_is_refused_with_a_message(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nstore: {{path: {tmp_path / 'j.db'}}}\n")
    done = run_cli("run", "-c", str(config), env={"UNDOPROXY_EVENT_LOOP": "trio", "PATH": ""})
    assert done.returncode != 0
    assert "UNDOPROXY_EVENT_LOOP='trio': expected one of uvloop, asyncio" in done.stderr
    assert "Traceback" not in done.stderr
