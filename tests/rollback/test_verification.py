"""A step is `compensated` only when a read-back shows it undone; every other outcome says why.

Each test makes the store misbehave the way a real server does, rolls back through a real
undoproxy, and checks both the report and the store's real state.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.rollback.helpers import AUTH, details, rollback_ends, statuses
from tests.support import objects
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

ORIGINAL = {
    "content-type": "text/plain",
    "content-language": "en",
    "cache-control": "max-age=60",
    "x-amz-meta-owner": "ada",
}
AGENT_HEADERS = {
    "Content-Type": "text/markdown",
    "Cache-Control": "no-store",
    "x-amz-meta-owner": "agent",
    "x-amz-meta-extra": "1",
}


def seed(store: objects.StoreState, key: str = "report.txt") -> objects.Obj:
    store.put(key, "quarterly figures v1", **{k.replace("-", "_"): v for k, v in ORIGINAL.items()})
    return objects.Obj(store.objects[key].body, dict(store.objects[key].headers))


def overwrite(up: Undoproxy, server: ThreadedServer, session: str, key: str = "report.txt") -> None:
    with up.agent(session, headers=AUTH) as s:
        r = s.put(
            f"{server.base_url}/o/{key}", data=b"# rewritten by the agent", headers=AGENT_HEADERS
        )
        assert r.status_code == 200, r.text


def test_a_restore_puts_body_and_metadata_back_and_reads_it_back(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    assert store.objects["report.txt"].headers["x-amz-meta-owner"] == "agent"

    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "read back: matches the snapshot" in details(report)[0]
    assert store.objects["report.txt"] == before  # body and every metadata header, exactly


def test_a_restore_that_loses_metadata_is_failed_saying_what_differs(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    store.drop_metadata = True  # the server answers 200 to the restore but keeps no metadata

    report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    [detail] = details(report)
    assert "PUT answered 200" in detail and "not as it was before" in detail
    for name in ("x-amz-meta-owner", "content-language", "cache-control"):
        assert f"header {name} is missing" in detail
    assert "ada" not in detail  # names, never values
    assert store.objects["report.txt"].body == before.body
    assert "x-amz-meta-owner" not in store.objects["report.txt"].headers

    # A second rollback reads first: the target is neither as before nor as the agent left
    # it, so nothing is sent blind; --force sends it again once the server behaves.
    puts = len(store.requests("PUT"))
    again = up.rollback(session_id)
    assert statuses(again) == ["failed"] and "not sent again" in details(again)[0]
    assert len(store.requests("PUT")) == puts
    store.drop_metadata = False
    rollback_ends(up, session_id, "rolled_back", ["compensated"], force=True)
    assert store.objects["report.txt"] == before


def test_a_server_that_ignores_the_restore_is_failed(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    seed(store)
    overwrite(up, server, session_id)
    store.ignore_writes = True
    report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    assert "the body differs" in details(report)[0]
    assert store.objects["report.txt"].body == b"# rewritten by the agent"


def test_a_delete_that_deletes_nothing_is_failed(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        created = s.post(f"{server.base_url}/o/", data=b"scratch").json()["id"]
    store.ignore_writes = True  # DELETE answers 204, the object stays (a soft delete)
    report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    assert "DELETE answered 204, but it is still there" in details(report)[0]
    assert created in store.objects

    store.ignore_writes = False  # the next rollback reads, finds it, deletes it, reads again
    again = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "read back: gone" in details(again)[0]
    assert created not in store.objects


def test_a_restore_that_cannot_be_read_back_is_unverified_then_verified_later(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    store.pass_reads, store.fail_reads, store.read_status = 1, 1, 405  # only the read-back

    report = up.rollback(session_id)
    assert (report["state"], report["counts"]) == ("rollback_incomplete", {"unverified": 1})
    assert "cannot be read back (GET answered HTTP 405)" in details(report)[0]
    assert store.objects["report.txt"] == before  # it did work, but nobody could show it

    puts = len(store.requests("PUT"))
    # readable now: decided by reading, not re-sent
    again = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "nothing was sent again" in details(again)[0]
    assert len(store.requests("PUT")) == puts


def test_a_read_back_that_fails_is_failed_and_a_later_rollback_reads_instead_of_resending(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    store.pass_reads, store.fail_reads, store.read_status = 1, 4, 503

    report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    assert "could not be read back to verify it (GET answered HTTP 503)" in details(report)[0]

    puts = len(store.requests("PUT"))
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert len(store.requests("PUT")) == puts and store.objects["report.txt"] == before


@pytest.mark.parametrize("status", [503, 401, 403])
def test_an_unreadable_target_before_a_restore_is_failed_and_nothing_is_sent(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str, status: int
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    store.fail_reads, store.read_status = 4, status  # every retry of the drift read fails
    puts = len(store.requests("PUT"))

    report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    assert f"HTTP {status}" in details(report)[0] and "nothing was sent" in details(report)[0]
    assert "conflict" not in details(report)[0] and "gone" not in details(report)[0]
    assert len(store.requests("PUT")) == puts

    store.fail_reads = 0
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert store.objects["report.txt"] == before


@pytest.mark.parametrize("status", [500, 401])
def test_an_unreadable_target_is_never_taken_for_gone(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str, status: int
) -> None:
    before = seed(store)
    with up.agent(session_id, headers=AUTH) as s:
        assert s.delete(f"{server.base_url}/o/report.txt").status_code == 204
    store.put("report.txt", "someone else's new file")  # it exists again...
    store.fail_reads, store.read_status = 4, status  # ...but cannot be read right now

    rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    assert store.objects["report.txt"].body == b"someone else's new file"  # not overwritten
    assert not [r for r in store.requests("PUT")]

    store.fail_reads = 0
    again = up.rollback(session_id)
    assert statuses(again) == ["conflict"]  # now readable: it exists again
    del store.objects["report.txt"]
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert store.objects["report.txt"] == before


def test_an_unknown_outcome_is_never_decided_from_an_unreadable_target(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    with up.agent(session_id, headers=AUTH) as s:
        r = s.put(
            f"{server.base_url}/o/report.txt",
            data=b"applied, answer lost",
            headers={"Content-Type": "text/plain", "X-Test-Drop": "after"},
        )
    assert r.status_code == 502
    [step] = up.steps(session_id)
    assert step["status"] == "unknown"
    store.fail_reads, store.read_status = 4, 401

    report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    assert "whether the request took effect (GET answered HTTP 401)" in details(report)[0]
    assert len(store.requests("PUT")) == 1  # nothing sent on a guess
    assert store.objects["report.txt"].body == b"applied, answer lost"

    store.fail_reads = 0
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert store.objects["report.txt"] == before


def test_weak_and_strong_etags_of_one_version_are_no_conflict(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    store.weak_etags = True  # GETs now say W/"x" where the PUT said "x"
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert store.objects["report.txt"] == before
    restore = store.requests("PUT")[-1]
    assert "If-Match" not in restore.headers  # a weak ETag can never satisfy If-Match


def test_deleting_a_folder_is_irreversible_and_nothing_is_written_back(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    store.put("docs/a.txt", "a", content_type="text/plain")
    store.put("docs/b.txt", "b", content_type="text/plain")
    with up.agent(session_id, headers=AUTH) as s:
        assert s.delete(f"{server.base_url}/o/docs/").status_code == 204
    assert not store.objects

    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "directory listing" in details(report)[0] and "by hand" in details(report)[0]
    assert not store.requests("PUT") and not store.objects  # no listing written back as a file


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/rpc", "JSON-RPC"),  # no pack knows it: the inference must not take `id` for a resource
        ("/mcp", "MCP tool call"),  # the mcp pack knows tools/call has no generic inverse
    ],
)
def test_a_json_rpc_answer_id_is_not_a_created_resource(
    up: Undoproxy,
    server: ThreadedServer,
    store: objects.StoreState,
    session_id: str,
    path: str,
    why: str,
) -> None:
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ticket"}}
    with up.agent(session_id, headers=AUTH) as s:
        assert s.post(f"{server.base_url}{path}", json=call).status_code == 200
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert why in details(report)[0]
    assert not store.requests("DELETE") and len(store.tickets) == 1


def test_an_inferred_creation_is_confirmed_before_it_is_claimed(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        job = s.post(f"{server.base_url}/v1/jobs", json={"run": "report"}).json()["id"]
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "cannot confirm what the POST created" in details(report)[0]
    assert f"/v1/jobs/{job}" in details(report)[0]
    assert not store.requests("DELETE")  # never "compensated: already gone"


def test_a_creation_found_by_its_id_is_never_called_undone_from_two_404s(
    ruled: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    # The rule names delete-created; the answer gives an id and no Location, so the URL is
    # undoproxy's guess. Gone by the time of the rollback: a DELETE answered 404 and a read
    # answered 404 would also be what a wrong guess looks like. Nothing shows it undone.
    with ruled.agent(session_id, headers=AUTH) as s:
        made = s.post(f"{server.base_url}/o/made/", data=b"draft").json()["id"]
    del store.objects[f"made/{made}"]  # someone removed it by hand meanwhile
    writes = store.writes_done
    report = rollback_ends(ruled, session_id, "rollback_incomplete", ["irreversible"])
    assert "cannot confirm what the POST created" in details(report)[0]
    assert store.writes_done == writes  # nothing was sent: there was nothing to delete


def test_dry_run_predicts_the_real_run_for_a_resource_written_twice(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    with up.agent(session_id, headers=AUTH) as s:
        s.put(
            f"{server.base_url}/o/report.txt",
            data=b"second",
            headers={"Content-Type": "text/plain"},
        )
    rollback_ends(up, session_id, "open", ["planned", "planned"], dry_run=True)
    rollback_ends(up, session_id, "rolled_back", ["compensated", "compensated"])
    assert store.objects["report.txt"] == before


def test_dry_run_predicts_a_conflict_once_for_a_resource_written_twice(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    seed(store)
    overwrite(up, server, session_id)
    with up.agent(session_id, headers=AUTH) as s:
        s.put(
            f"{server.base_url}/o/report.txt",
            data=b"second",
            headers={"Content-Type": "text/plain"},
        )
    store.put("report.txt", "a person's edit", content_type="text/plain")
    plan = up.rollback(session_id, dry_run=True)
    report = up.rollback(session_id)
    assert statuses(plan) == statuses(report) == ["conflict", "conflict"]
    assert "newer step #2" in details(report)[1]
    assert store.objects["report.txt"].body == b"a person's edit"


def test_a_secret_in_the_url_never_shows_in_a_report_about_an_unreachable_upstream(
    up: Undoproxy, store: objects.StoreState, upstream_cert: tuple[Path, Path], session_id: str
) -> None:
    server = objects.serve(store, upstream_cert)
    seed(store)
    with up.agent(session_id, headers=AUTH) as s:
        url = f"{server.base_url}/o/report.txt?api_key=sk-in-the-query-99"
        assert s.put(url, data=b"v2", headers={"Content-Type": "text/plain"}).status_code == 200
    server.stop()  # the upstream goes away
    r = up.api("POST", f"/api/sessions/{session_id}/rollback", json={})
    assert r.status_code == 200 and r.json()["steps"][0]["status"] == "failed"
    assert "sk-in-the-query-99" not in r.text
    assert "redacted" in r.json()["steps"][0]["detail"]


def test_a_step_a_person_resolved_no_longer_holds_the_session_back(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{server.base_url}/v1/jobs", json={"run": "x"}).raise_for_status()
    assert up.rollback(session_id)["state"] == "rollback_incomplete"
    [step] = up.steps(session_id)
    # What `undoproxy resolve STEP` records once a person has undone it by hand.
    db = sqlite3.connect(up.dir / "journal.db")
    with db:
        db.execute("UPDATE steps SET status='resolved' WHERE id=?", (step["id"],))
    db.close()
    report = rollback_ends(up, session_id, "rolled_back", ["skipped"])
    assert details(report) == ["resolved by a person"]


def test_an_unknown_outcome_with_nothing_to_read_is_never_undone_blind(
    ruled: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    # The rule's inverse needs no answer (DELETE of the body's target), but the connection
    # broke after the PUT may have been sent, and there is no snapshot: whether the step
    # happened cannot be read, so its inverse is not sent on a guess.
    target = f"{server.base_url}/o/keep.txt"
    store.put("keep.txt", "someone's file")
    with ruled.agent(session_id, headers=AUTH) as s:
        r = s.put(
            f"{server.base_url}/o/linked/x",
            json={"target": target},
            headers={"X-Test-Drop": "after"},
        )
    assert r.status_code == 502
    writes = store.writes_done
    report = rollback_ends(ruled, session_id, "rollback_incomplete", ["unverified"])
    assert "outcome unknown" in details(report)[0]
    assert store.writes_done == writes and "keep.txt" in store.objects  # no DELETE went out
