"""README promises about bodies and state files, checked where a user would look: the upstream's
record of what it received, the journal's database file and the file system."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import received
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

BIG = os.urandom(3 * 1024 * 1024 // 2).hex().encode()  # 3 MiB: over what the journal keeps


@pytest.fixture(scope="module")
def holding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    rules = [
        {
            "name": "hold-uploads",
            "match": {"method": "PUT", "path": "/uploads/**"},
            "action": "hold",
        }
    ]
    instance = Undoproxy(tmp_path_factory.mktemp("bodies"), {"rules": rules}).start()
    yield instance
    instance.stop()


def test_a_large_held_mutation_reaches_the_upstream_only_once_approved(
    holding: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/uploads/{uuid.uuid4().hex}"
    agent = holding.agent(session_id)
    waiting = in_thread(
        lambda: agent.put(
            tls_upstream.base_url + marker,
            data=BIG,
            timeout=60,
            headers={"Content-Type": "application/octet-stream"},
        )
    )
    approval = wait_pending(holding, session_id)
    # The whole body has been read by undoproxy (it is held), and not one byte went on.
    assert [r for r in received(tls_upstream) if r.path == marker and r.method == "PUT"] == []
    assert decide(holding, approval["id"], "approve").status_code == 200
    assert waiting.result(60).status_code == 200
    [put] = [r for r in received(tls_upstream) if r.path == marker and r.method == "PUT"]
    assert put.body == BIG


def test_the_journal_keeps_a_bounded_body_with_its_full_length_and_hash(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/files/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        assert agent.post(tls_upstream.base_url + marker, data=BIG).status_code == 200
        assert agent.get(tls_upstream.base_url + "/big?size=200000").status_code == 200
    proxy.api("GET", f"/api/sessions/{session_id}")  # the steps are committed by now
    db = sqlite3.connect(proxy.dir / "journal.db")
    rows = db.execute(
        "SELECT method, length(request_body), request_body_len, request_body_sha256, "
        "length(response_body), response_body_len FROM steps WHERE session_id=? ORDER BY seq",
        (session_id,),
    ).fetchall()
    db.close()
    post, get = rows
    assert post[:4] == ("POST", 1024 * 1024, len(BIG), hashlib.sha256(BIG).hexdigest())
    # A read keeps 64 KiB of its response, and its full length.
    assert (get[0], get[4], get[5]) == ("GET", 64 * 1024, 200000)


def test_state_files_are_private(proxy: Undoproxy) -> None:
    state = proxy.state_dir
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("admin-token", "credentials.key", "mitmproxy-ca.pem"):
        mode = stat.S_IMODE((state / name).stat().st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"
