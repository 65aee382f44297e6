"""A pack rule that names no action recognises and compensates, but does not grant permission:
`defaults.mutations` still decides whether a mutation it matches may go (a user who holds or
denies every mutation is not overridden by a pack that matches any host)."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.conftest import received
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer

MUTATION = {"query": "mutation { addStar(id: 1) { id } }"}
QUERY = {"query": "{ viewer { login } }"}


def test_a_graphql_mutation_is_held_under_defaults_hold_and_a_query_is_not(
    tmp_path: Path, tls_upstream: ThreadedServer, session_id: str
) -> None:
    proxy = Undoproxy(tmp_path, {"defaults": {"mutations": "hold"}}).start()
    try:
        marker = uuid.uuid4().hex
        url = f"{tls_upstream.base_url}/{marker}/graphql"
        agent = proxy.agent(session_id)
        assert agent.post(url, json=QUERY, timeout=30).ok  # the pack says: a read
        held = in_thread(lambda: agent.post(url, json=MUTATION, timeout=60))
        approval = wait_pending(proxy, session_id)
        assert approval["rule"] == "graphql/mutation"
        assert len([r for r in received(tls_upstream) if marker in r.path]) == 1  # the query
        assert decide(proxy, approval["id"], "deny").status_code == 200
        assert held.result(30).status_code == 403
        assert len([r for r in received(tls_upstream) if marker in r.path]) == 1
    finally:
        proxy.stop()


def test_rules_explain_and_packs_say_defaults_decide(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("defaults: {mutations: deny}\n")

    def cli(*args: str) -> str:
        run = run_cli(*args)
        assert run.returncode == 0, run.stderr
        return run.stdout

    shown = cli("rules", "explain", "MOVE", "https://dav.test/a.txt", "-c", str(config))
    assert "Matched: webdav/move" in shown
    assert "action:        deny: never forwarded" in shown
    assert "the pack rule names no action of its own" in shown
    listing = cli("packs", "webdav")
    assert "defaults" in listing.split("webdav/move", 1)[1].splitlines()[0]
