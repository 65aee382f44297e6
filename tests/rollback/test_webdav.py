"""Rollback against a real WebDAV server (WsgiDAV): files restored and read back byte for
byte, deleted folders reported irreversible, never written back as files. WebDAV's own methods
(MKCOL, MOVE, COPY, PROPPATCH, LOCK) are in test_webdav_methods.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rollback.helpers import details, rollback_ends, statuses
from tests.support.proc import Undoproxy
from tests.support.webdav import WebDav, agent


@pytest.fixture
def dav(tmp_path: Path, upstream_cert: tuple[Path, Path]) -> Iterator[WebDav]:
    root = tmp_path / "dav"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_bytes(b"first draft\n")
    (root / "docs" / "b.txt").write_bytes(b"notes\n")
    server = WebDav(root, upstream_cert).start()
    yield server
    server.stop()


def test_a_file_written_twice_is_restored_and_read_back(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        for text in (b"second draft\n", b"third draft\n"):
            r = s.put(f"{dav.base_url}/docs/a.txt", data=text)
            assert r.status_code in (200, 204), r.text
    assert (dav.root / "docs" / "a.txt").read_bytes() == b"third draft\n"

    plan = up.rollback(session_id, dry_run=True)
    assert statuses(plan) == ["planned", "planned"]
    report = rollback_ends(up, session_id, "rolled_back", ["compensated", "compensated"])
    assert all("read back: matches the snapshot" in d for d in details(report))
    assert (dav.root / "docs" / "a.txt").read_bytes() == b"first draft\n"


def test_a_created_file_is_deleted_and_a_deleted_one_comes_back(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        assert s.put(f"{dav.base_url}/docs/new.txt", data=b"made by the agent").status_code == 201
        assert s.delete(f"{dav.base_url}/docs/b.txt").status_code == 204
    report = rollback_ends(up, session_id, "rolled_back", ["compensated", "compensated"])
    assert "read back: gone" in details(report)[1]
    assert sorted(p.name for p in (dav.root / "docs").iterdir()) == ["a.txt", "b.txt"]
    assert (dav.root / "docs" / "b.txt").read_bytes() == b"notes\n"


def test_deleting_a_folder_is_irreversible_and_no_listing_is_written_back(
    up: Undoproxy, dav: WebDav, session_id: str
) -> None:
    with agent(up, session_id) as s:
        assert s.delete(f"{dav.base_url}/docs/").status_code == 204
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "directory listing" in details(report)[0]
    assert list(dav.root.iterdir()) == []  # no file named "docs" holding an HTML page
