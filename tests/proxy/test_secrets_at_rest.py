"""Secrets in URLs never reach the journal's database in clear, and rollback still works.

An API that authenticates with `?api_key=` (many do) is written to through the real proxy;
the database file and its WAL are then searched byte for byte, and a rollback must still
restore the target: the key it needs was kept encrypted, not in the URL columns.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support import rest
from tests.support.proc import Undoproxy

SECRET = f"k-{uuid.uuid4().hex}"


def _files(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("journal.db*")))


def test_a_query_string_key_is_kept_encrypted_and_rollback_still_restores(
    tmp_path: Path, upstream_cert: tuple[Path, Path], session_id: str
) -> None:
    state = rest.RestState(query_key=SECRET)
    state.items["7"] = {"id": "7", "name": "Ada"}
    api = rest.serve(state, upstream_cert)
    instance = Undoproxy(tmp_path).start()
    try:
        base = f"{api.base_url}/items"
        with instance.agent(session_id) as agent:
            assert agent.put(f"{base}/7?api_key={SECRET}", json={"name": "Eve"}).ok
            created = agent.post(f"{base}?api_key={SECRET}", json={"name": "new"})
            assert created.status_code == 201
        assert state.items["7"]["name"] == "Eve"
        # Everything is committed once the API answers (its reads flush the journal).
        shown = instance.api("GET", f"/api/sessions/{session_id}").json()
        assert all(SECRET not in s["url"] for s in shown["steps"])
        assert SECRET.encode() not in _files(tmp_path)

        report = instance.api("POST", f"/api/sessions/{session_id}/rollback").json()
        assert report["state"] == "rolled_back", [
            (s["status"], s["detail"]) for s in report["steps"]
        ]
        assert state.items == {"7": {"id": "7", "name": "Ada"}}
        assert SECRET.encode() not in _files(tmp_path)
    finally:
        assert instance.stop() == 0
        api.stop()
    assert SECRET.encode() not in _files(tmp_path)
