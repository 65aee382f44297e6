"""Rollback of WebDAV's own methods against a real WebDAV server (WsgiDAV over TLS), the agent
a `requests` client: MKCOL, MOVE, COPY, PROPPATCH, LOCK and DELETE are undone and read back,
the folder on disk and every dead property and lock the server keeps compared with how they
were before the session; what cannot be undone is reported irreversible, and a target changed
by someone else since is a conflict, never overwritten."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.rollback.helpers import details, rollback_ends
from tests.support.proc import Undoproxy
from tests.support.webdav import WebDav, agent

LOCKINFO = (
    b'<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/>'
    b"</D:lockscope><D:locktype><D:write/></D:locktype><D:owner>agent</D:owner></D:lockinfo>"
)


@pytest.fixture
def dav(tmp_path: Path, upstream_cert: tuple[Path, Path]) -> Iterator[WebDav]:
    root = tmp_path / "dav"
    (root / "docs").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "docs" / "a.txt").write_bytes(b"first draft\n")
    (root / "docs" / "b.txt").write_bytes(b"notes\n")
    (root / "other" / "c.txt").write_bytes(b"elsewhere\n")
    server = WebDav(root, upstream_cert).start()
    server.set_props("/docs/a.txt", color="red", owner="ada")
    server.set_props("/docs/b.txt", color="green")
    server.set_props("/docs/", project="<T:name>apollo</T:name>")
    yield server
    server.stop()


def dav_request(
    s: requests.Session, method: str, url: str, body: bytes = b"", **headers: str
) -> requests.Response:
    return s.request(method, url, data=body or None, headers=headers)


def test_mkcol_is_undone_by_deleting_the_new_collection(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        assert dav_request(s, "MKCOL", f"{dav.base_url}/reports/").status_code == 201
    assert (dav.root / "reports").is_dir()
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "read back: 1 target as before" in details(report)[0]
    assert dav.state() == before


def test_a_collection_someone_filled_since_is_not_deleted(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        assert dav_request(s, "MKCOL", f"{dav.base_url}/reports/").status_code == 201
    with dav.direct() as other:  # another client puts a file in it, not through undoproxy
        assert other.put(f"{dav.base_url}/reports/theirs.txt", data=b"mine").status_code == 201
    rollback_ends(up, session_id, "rollback_incomplete", ["conflict"])
    assert (dav.root / "reports" / "theirs.txt").read_bytes() == b"mine"


@pytest.mark.parametrize("overwrite", ["T", "F"])
def test_a_move_is_moved_back_with_its_properties(
    up: Undoproxy, dav: WebDav, session_id: str, overwrite: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(
            s,
            "MOVE",
            f"{dav.base_url}/docs/b.txt",
            Destination=f"{dav.base_url}/other/moved.txt",
            Overwrite=overwrite,
        )
        assert r.status_code == 201, r.text
    assert not (dav.root / "docs" / "b.txt").exists()
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "read back: 3 targets as before" in details(report)[0]
    assert dav.state() == before


def test_a_move_over_a_file_restores_both_files_and_their_properties(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(
            s, "MOVE", f"{dav.base_url}/docs/a.txt", Destination="/docs/b.txt"
        )  # a relative Destination, Overwrite absent (T)
        assert r.status_code == 204, r.text
    assert (dav.root / "docs" / "b.txt").read_bytes() == b"first draft\n"
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "then 2 more like it" in details(report)[0]
    assert dav.state() == before


def test_a_moved_folder_comes_back_with_its_members(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(s, "MOVE", f"{dav.base_url}/docs/", Destination=f"{dav.base_url}/archive/")
        assert r.status_code == 201, r.text
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert dav.state() == before


def test_a_move_over_a_folder_is_irreversible_and_says_why(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        r = dav_request(s, "MOVE", f"{dav.base_url}/docs/a.txt", Destination="/other/")
        assert r.status_code == 204, r.text
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "replaced the collection" in details(report)[0]
    assert "/other/" in details(report)[0]


def test_a_copy_to_a_new_name_is_deleted(up: Undoproxy, dav: WebDav, session_id: str) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(s, "COPY", f"{dav.base_url}/docs/", Destination="/copy/")
        assert r.status_code == 201, r.text
        r = dav_request(s, "COPY", f"{dav.base_url}/docs/a.txt", Destination="/other/a.txt")
        assert r.status_code == 201, r.text
    assert (dav.root / "copy" / "a.txt").exists()
    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 2)
    assert dav.state() == before


def test_a_copy_over_a_file_puts_its_body_and_properties_back(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(s, "COPY", f"{dav.base_url}/docs/a.txt", Destination="/docs/b.txt")
        assert r.status_code == 204, r.text
    assert (dav.root / "docs" / "b.txt").read_bytes() == b"first draft\n"
    assert set(dav.propfind("/docs/b.txt").dead()) == {"{urn:test}color", "{urn:test}owner"}
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert dav.state() == before  # owner, which came with the copy, is gone again


def test_a_copy_over_a_folder_is_irreversible(up: Undoproxy, dav: WebDav, session_id: str) -> None:
    with agent(up, session_id) as s:
        r = dav_request(s, "COPY", f"{dav.base_url}/docs/a.txt", Destination="/other/")
        assert r.status_code == 204, r.text
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "replaced the collection" in details(report)[0]


PROPPATCH = (
    b'<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:T="urn:test">'
    b"<D:set><D:prop><T:color>blue</T:color><T:size>12</T:size></D:prop></D:set>"
    b"<D:remove><D:prop><T:owner/></D:prop></D:remove></D:propertyupdate>"
)


def test_proppatch_puts_back_exactly_the_prior_properties(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    dav.set_props("/docs/a.txt", untouched="yes")
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(s, "PROPPATCH", f"{dav.base_url}/docs/a.txt", PROPPATCH)
        assert r.status_code == 207 and "424" not in r.text, r.text
    now = dav.propfind("/docs/a.txt").dead()
    assert "{urn:test}owner" not in now and "{urn:test}size" in now
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert dav.state() == before


def test_proppatch_changed_by_someone_else_since_is_a_conflict(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        assert dav_request(s, "PROPPATCH", f"{dav.base_url}/docs/a.txt", PROPPATCH).ok
    dav.set_props("/docs/a.txt", color="purple")  # someone else, straight on the server
    rollback_ends(up, session_id, "rollback_incomplete", ["conflict"])
    assert "purple" in dav.propfind("/docs/a.txt").dead()["{urn:test}color"]


def test_a_lock_is_released_and_a_lock_that_created_a_file_removes_it(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(s, "LOCK", f"{dav.base_url}/docs/a.txt", LOCKINFO, Timeout="Second-600")
        assert r.status_code == 200 and r.headers["Lock-Token"], r.text
        r = dav_request(s, "LOCK", f"{dav.base_url}/docs/new.txt", LOCKINFO)
        assert r.status_code == 201, r.text
    assert dav.propfind("/docs/a.txt").lock_tokens()
    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 2)
    assert dav.state() == before  # no lock left, no empty new.txt
    with dav.direct() as other:  # the file is writable again without a lock token
        assert other.put(f"{dav.base_url}/docs/a.txt", data=b"x").status_code == 204


def test_a_lock_that_expired_before_the_rollback_is_already_undone(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        r = dav_request(s, "LOCK", f"{dav.base_url}/docs/a.txt", LOCKINFO)
        token = r.headers["Lock-Token"]
    with dav.direct() as other:  # released meanwhile (as an expiry would)
        assert other.request(
            "UNLOCK", f"{dav.base_url}/docs/a.txt", headers={"Lock-Token": token}
        ).ok
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "nothing was sent" in details(report)[0]


def test_a_deleted_file_comes_back_with_its_dead_properties(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    before = dav.state()
    with agent(up, session_id) as s:
        assert s.delete(f"{dav.base_url}/docs/a.txt").status_code == 204
    assert not (dav.root / "docs" / "a.txt").exists()
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "then 1 more like it" in details(report)[0]
    assert dav.state() == before


EXECUTABLE = (
    b'<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:A="http://apache.org/dav/props/">'
    b"<D:set><D:prop><A:executable>T</A:executable></D:prop></D:set></D:propertyupdate>"
)


def test_a_property_a_client_can_set_comes_back_after_a_delete(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    # Apache's `executable` is live on mod_dav but set by PROPPATCH: a restore that treated it
    # as computed by the server would lose a script's x bit and still say "as before".
    with dav.direct() as s:
        r = s.request("PROPPATCH", f"{dav.base_url}/docs/a.txt", data=EXECUTABLE)
        assert r.status_code == 207 and "200 OK" in r.text, r.text
    before = dav.state()
    assert "{http://apache.org/dav/props/}executable" in before["/docs/a.txt"][1]
    with agent(up, session_id) as s:
        assert s.delete(f"{dav.base_url}/docs/a.txt").status_code == 204
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert dav.state() == before


def test_a_write_under_the_agents_own_lock_is_undone_with_its_lock_token(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    """LIFO undoes the write while the agent's lock still holds: the server refuses the undo
    (423) until it carries the lock's token, as the agent's write did; then the lock goes."""
    before = dav.state()
    with agent(up, session_id) as s:
        r = dav_request(s, "LOCK", f"{dav.base_url}/docs/", LOCKINFO, Depth="infinity")
        token = r.headers["Lock-Token"]
        for name in ("a.txt", "new.txt"):
            r = s.put(
                f"{dav.base_url}/docs/{name}", data=b"locked edit\n", headers={"If": f"({token})"}
            )
            assert r.status_code in (201, 204), r.text
        with dav.direct() as other:  # the lock holds for everyone else
            assert other.put(f"{dav.base_url}/docs/a.txt", data=b"x").status_code == 423
    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 3)
    assert dav.state() == before
