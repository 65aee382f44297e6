"""What a compensation replays is encrypted at rest: the snapshot of an overwritten object is
nowhere in the database file in clear, rollback still restores it (after a restart too), and
with another credentials key the step is reported, never restored with an empty body."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from cryptography.fernet import Fernet

from tests.rollback.helpers import AUTH, details, rollback_ends, statuses
from tests.support import objects
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


def database_bytes(proxy: Undoproxy) -> bytes:
    """The journal file and its WAL, as anyone who can read the disk sees them."""
    db = proxy.dir / "journal.db"
    return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())


def overwrite(proxy: Undoproxy, server: ThreadedServer, session: str, key: str) -> None:
    with proxy.agent(session, headers=AUTH) as s:
        r = s.put(f"{server.base_url}/o/{key}", data=b"overwritten by the agent")
        assert r.status_code == 200, r.text


def test_the_snapshot_is_sealed_on_disk_and_restored_after_a_restart(
    tmp_path: Path, server: ThreadedServer, store: objects.StoreState
) -> None:
    original = f"customer record {uuid.uuid4().hex} with a home address"
    store.put("customer.json", original, content_type="text/plain")
    proxy = Undoproxy(tmp_path / "u").start()
    try:
        overwrite(proxy, server, "sealed", "customer.json")
        step = proxy.steps("sealed")[-1]
        assert step["status"] == "succeeded"
    finally:
        proxy.stop()
    assert original.encode() not in database_bytes(proxy)
    assert b"body_sealed" in database_bytes(proxy)

    proxy = Undoproxy(tmp_path / "u").start()  # the same state dir: its key opens the seals
    try:
        rollback_ends(proxy, "sealed", "rolled_back", ["compensated"])
        assert store.objects["customer.json"].body == original.encode()
    finally:
        proxy.stop()
    assert original.encode() not in database_bytes(proxy)


def test_with_another_key_the_step_is_reported_not_written_back_empty(
    tmp_path: Path, server: ThreadedServer, store: objects.StoreState
) -> None:
    store.put("notes.txt", "the notes as they were", content_type="text/plain")
    proxy = Undoproxy(tmp_path / "u").start()
    try:
        overwrite(proxy, server, "moved", "notes.txt")
    finally:
        proxy.stop()

    # The journal moved to an installation with another credentials key.
    shutil.rmtree(proxy.state_dir)
    key = Fernet.generate_key().decode()
    other = Undoproxy(tmp_path / "u", env={"UNDOPROXY_CREDENTIALS_KEY": key}).start()
    try:
        report = other.rollback("moved")
        assert report["state"] != "rolled_back"
        assert statuses(report) == ["irreversible"]
        assert "encrypted with another credentials key" in details(report)[0]
        assert store.objects["notes.txt"].body == b"overwritten by the agent"  # nothing sent
    finally:
        other.stop()


def test_with_another_key_nothing_is_sent_without_the_agents_credentials(
    tmp_path: Path, server: ThreadedServer, store: objects.StoreState
) -> None:
    # A creation's undo is a DELETE with no body: only its credentials were sealed. Sent
    # without them it could be answered by another account (or as anonymous), and read back
    # as "gone" by a 401/404 that shows nothing: it is not sent at all.
    with_key = Undoproxy(tmp_path / "u").start()
    try:
        with with_key.agent("creds", headers=AUTH) as s:
            made = s.post(f"{server.base_url}/o/", data=b"a note").json()["id"]
    finally:
        with_key.stop()
    shutil.rmtree(with_key.state_dir)
    key = Fernet.generate_key().decode()
    other = Undoproxy(tmp_path / "u", env={"UNDOPROXY_CREDENTIALS_KEY": key}).start()
    try:
        deletes = len(store.requests("DELETE"))
        report = other.rollback("creds")
        assert report["state"] == "rollback_incomplete"
        assert statuses(report) == ["failed"]
        assert (
            "credentials for this step are encrypted with another credentials key"
            in (details(report)[0])
        )
        assert len(store.requests("DELETE")) == deletes and made in store.objects
    finally:
        other.stop()
