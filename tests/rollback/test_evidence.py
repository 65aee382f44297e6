"""Rollback's verdicts are true both ways, on the REST shapes that made them false (issue #21).

Each test makes an agent's writes through a real undoproxy with no rules against an API with a
real server's quirk (tests/support/quirks.py), rolls back, and checks both the report and the
API's real state: never `compensated`/`skipped` for a change that stayed, never `failed` for a
resource that is back but for what no client can set.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rollback.helpers import details, rollback_ends
from tests.support import quirks
from tests.support.holding import until
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

TOKEN = "quirks-token-7"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(upstream_cert: tuple[Path, Path]) -> Iterator[tuple[quirks.Quirks, ThreadedServer]]:
    state = quirks.Quirks(token=TOKEN)
    server = quirks.serve(state, upstream_cert)
    yield state, server
    server.stop()


def agent_call(up: Undoproxy, session: str, method: str, url: str, **kwargs: Any) -> Any:
    with up.agent(session, headers=AUTH) as s:
        return s.request(method, url, **kwargs)


def evidence(report: dict[str, Any], at: int = 0) -> dict[str, Any]:
    return dict(report["steps"][at]["evidence"] or {})


# --- fields no client can set are reported, not failed ----------------------------------------


@pytest.mark.parametrize("envelope", [False, True], ids=["flat", "kinto-style-envelope"])
@pytest.mark.parametrize("answer", ["echo", "empty", "status"])
def test_a_restore_differing_only_in_server_set_fields_is_compensated(
    up: Undoproxy,
    api: tuple[quirks.Quirks, ThreadedServer],
    session_id: str,
    envelope: bool,
    answer: str,
) -> None:
    state, server = api
    state.envelope, state.put_answer = envelope, answer
    state.seed("7", name="Ada", plan="free")
    before = state.client_fields("7")
    body = {"name": "Eve", "plan": "pro"}
    r = agent_call(
        up,
        session_id,
        "PUT",
        f"{server.base_url}/records/7",
        json={"data": body} if envelope else body,
    )
    assert r.status_code in (200, 204)
    assert state.records["7"]["name"] == "Eve"

    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert state.client_fields("7") == before  # every field a client sets is back
    prefix = "data." if envelope else ""
    assert f"server-set fields differ: {prefix}revision, {prefix}updated_at" in details(report)[0]
    assert evidence(report)["shows"] == "as before, but for fields the server sets"


def test_a_field_the_server_kept_as_the_agent_left_it_is_not_server_set(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    # The agent's value stays where the restore wrote the old one: not restored, whatever else.
    state, server = api
    state.seed("7", name="Ada")
    agent_call(up, session_id, "PATCH", f"{server.base_url}/records/7", json={"name": "Eve"})
    original = quirks._written

    def keeps_name(st: quirks.Quirks, rid: str, fields: dict[str, Any], before: Any) -> Any:
        fields = {**fields, "name": before["name"]} if before else fields
        return original(st, rid, fields, before)

    quirks._written = keeps_name  # type: ignore[assignment]
    try:
        report = rollback_ends(up, session_id, "rollback_incomplete", ["failed"])
    finally:
        quirks._written = original
    assert "changed: name" in details(report)[0]
    assert state.records["7"]["name"] == "Eve"


# --- an error answer is no evidence -------------------------------------------------------------


def test_a_put_that_landed_but_was_answered_502_is_undone(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    state.seed("7", name="Ada")
    before = state.client_fields("7")
    r = agent_call(
        up,
        session_id,
        "PUT",
        f"{server.base_url}/records/7",
        json={"name": "Eve"},
        headers={"X-Test-Fail": "502-after"},
    )
    assert r.status_code == 502 and state.records["7"]["name"] == "Eve"  # it landed
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "the upstream answered HTTP 502, but it changed the target" in details(report)[0]
    assert state.client_fields("7") == before


def test_a_failed_write_that_changed_nothing_is_skipped_on_a_read(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    state.seed("7", name="Ada")
    r = agent_call(up, session_id, "PATCH", f"{server.base_url}/records/8", json={"name": "x"})
    assert r.status_code == 404
    report = rollback_ends(up, session_id, "rolled_back", ["skipped"])
    assert evidence(report)["read"].endswith("/records/8")
    assert evidence(report)["status"] == 404


@pytest.mark.parametrize("quirk", ["see_other", "bad_request"])
def test_a_post_with_an_error_answer_is_never_called_done(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str, quirk: str
) -> None:
    state, server = api
    if quirk == "see_other":
        state.see_other = True
        r = agent_call(
            up,
            session_id,
            "POST",
            f"{server.base_url}/records",
            json={"name": "x"},
            allow_redirects=False,
        )
        assert r.status_code == 303 and len(state.records) == 1  # it created one
    else:
        r = agent_call(
            up,
            session_id,
            "POST",
            f"{server.base_url}/records",
            data=b"[1, 2]",
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400
    report = rollback_ends(up, session_id, "rollback_incomplete", ["unverified"])
    assert "nothing undoproxy can read shows whether it changed anything" in details(report)[0]
    assert [m for m, _ in state.log].count("DELETE") == 0  # nothing guessed, nothing deleted


# --- the URL undoproxy reads must be where the write went ---------------------------------------


def test_a_put_answered_200_on_a_url_that_reads_as_absent_is_not_called_undone(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    # GET /docs/{name} never finds what PUT /docs/{name} writes: a GET before and after the
    # write answer 404, so "already as before" would be a lie.
    state, server = api
    r = agent_call(up, session_id, "PUT", f"{server.base_url}/docs/report", json={"text": "v2"})
    assert r.status_code == 200
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "this URL does not show what it changed" in details(report)[0]
    assert state.docs["report"]["text"] == "v2"  # the change stays: the report says so
    assert ("DELETE", "/docs/report") not in state.log


def test_a_compensation_sent_to_the_wrong_url_is_never_compensated(
    tmp_path_factory: pytest.TempPathFactory,
    api: tuple[quirks.Quirks, ThreadedServer],
    session_id: str,
) -> None:
    # A rule's template names a URL where the resource does not live: a DELETE answered 404
    # and a read answered 404 show nothing undone.
    state, server = api
    rules = [
        {
            "name": "wrong-url",
            "match": {"method": "POST", "path": "/records"},
            "compensate": {"method": "DELETE", "url": "/records/old-${response.body.id}"},
        }
    ]
    instance = Undoproxy(tmp_path_factory.mktemp("wrong-url"), {"rules": rules}).start()
    try:
        r = agent_call(
            instance, session_id, "POST", f"{server.base_url}/records", json={"name": "x"}
        )
        assert r.status_code == 201
        report = rollback_ends(instance, session_id, "rollback_incomplete", ["unverified"])
        assert "nothing shows that what the step created was ever at this URL" in details(report)[0]
        assert len(state.records) == 1  # still there: the report does not pretend otherwise
    finally:
        instance.stop()


# --- absence and restoration in the shapes real servers give them -------------------------------


def test_a_tombstone_reads_as_gone(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    state.tombstones = True
    r = agent_call(up, session_id, "POST", f"{server.base_url}/records", json={"name": "x"})
    assert r.status_code == 201
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "read back: gone (GET answered HTTP 200 with a tombstone)" in details(report)[0]
    assert state.records == {}


def test_a_deleted_record_recreated_with_new_server_fields_is_compensated(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    state.seed("7", name="Ada", tags=["a", "b"])
    before = state.client_fields("7")
    agent_call(up, session_id, "DELETE", f"{server.base_url}/records/7")
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "server-set fields differ: created_at, updated_at" in details(report)[0]
    assert state.client_fields("7") == before


def test_a_value_computed_per_read_is_neither_a_conflict_nor_a_failure(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    state.views = True
    state.seed("7", name="Ada")
    before = state.client_fields("7")
    agent_call(up, session_id, "PUT", f"{server.base_url}/records/7", json={"name": "Eve"})
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert state.client_fields("7") | {"views": 0} == before | {"views": 0}
    assert "views" in details(report)[0]


def test_someone_elses_change_is_still_a_conflict(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    state.seed("7", name="Ada", plan="free")
    agent_call(up, session_id, "PUT", f"{server.base_url}/records/7", json={"name": "Eve"})
    # undoproxy reads what the write left right after it (its answer has no ETag)
    until(lambda: state.log[-1] == ("GET", "/records/7"), what="the read after the write")
    state.records["7"]["plan"] = "enterprise"  # a person, after the agent
    report = rollback_ends(up, session_id, "rollback_incomplete", ["conflict"])
    assert "plan" in details(report)[0]
    assert state.records["7"]["plan"] == "enterprise"  # nothing was overwritten


def test_bytes_are_restored_as_stored_content_coding_included(
    up: Undoproxy, api: tuple[quirks.Quirks, ThreadedServer], session_id: str
) -> None:
    state, server = api
    stored = gzip.compress(b"quarterly figures\n" * 50)
    state.blobs["report.txt"] = (stored, {"content-type": "text/plain", "content-encoding": "gzip"})
    r = agent_call(
        up,
        session_id,
        "PUT",
        f"{server.base_url}/blobs/report.txt",
        data=b"rewritten",
        headers={"Content-Type": "text/plain"},
    )
    assert r.status_code == 204
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    body, headers = state.blobs["report.txt"]
    assert body == stored  # the gzip bytes, not their decoded text
    assert headers["content-encoding"] == "gzip"
