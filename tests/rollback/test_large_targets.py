"""Large targets roll back from evidence: a snapshot too large for the journal is kept in an
encrypted body file, the restore streams it back from there, and the read-back compares by
SHA-256. Memory stays bounded whatever the size.

Through a real `undoproxy run` (`proxy.max_body: 200MiB`), with curl, to a blob store that
keeps objects on disk and streams them both ways (tests/support/blobs.py).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.memory import MiB, peak_rss
from tests.support import blobs
from tests.support.holding import until
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

MAX_BODY = 200 * MiB  # the instance's proxy.max_body: the 200 MB PUT is at the limit


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("blobs")


@pytest.fixture(scope="module")
def store(root: Path) -> Iterator[ThreadedServer]:
    server = ThreadedServer(blobs.create_app(root)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"proxy": {"max_body": "200MiB"}}
    instance = Undoproxy(tmp_path_factory.mktemp("large-targets"), config).start()
    yield instance
    instance.stop()


def _put(proxy: Undoproxy, session: str, url: str, body: Path) -> str:
    done = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "-x", proxy.proxy_url(session), "-T", str(body),
         "-w", "\n%{http_code}", url],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.stdout.rpartition("\n")[2]


def _bodies(proxy: Undoproxy) -> list[Path]:
    return sorted((proxy.state_dir / "bodies").rglob("*.body"))


def test_an_untouched_200_mb_put_rolls_back_compensated_in_bounded_memory(
    proxy: Undoproxy, store: ThreadedServer, root: Path, tmp_path: Path, session_id: str
) -> None:
    name = f"big-{uuid.uuid4().hex[:8]}"
    before = blobs.write_blob(root, name, MAX_BODY, b"before")
    after = blobs.write_blob(tmp_path, "new", MAX_BODY, b"after")
    baseline = peak_rss(proxy)
    assert _put(proxy, session_id, f"{store.base_url}/blobs/{name}", tmp_path / "new") == "200"
    assert blobs.sha256_of(root, name) == after
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    assert step["request"]["body_length"] == MAX_BODY
    kept = _bodies(proxy)
    assert len(kept) == 1  # the snapshot: encrypted, not the bytes as they were
    with kept[0].open("rb") as f:
        assert b"\x00" * 64 not in f.read(1 << 20)

    report = proxy.rollback(session_id)
    [entry] = report["steps"]
    assert entry["status"] == "compensated", entry
    assert "matches the snapshot" in entry["detail"]
    assert blobs.sha256_of(root, name) == before
    assert report["state"] == "rolled_back"
    assert _bodies(proxy) == []  # rolled back: nothing will replay it again
    # Two 200 MB transfers each way and a 200 MB rollback: memory stays bounded.
    assert peak_rss(proxy) - baseline < 150 * MiB


def test_a_target_changed_since_is_a_conflict_and_is_not_overwritten(
    proxy: Undoproxy, store: ThreadedServer, root: Path, tmp_path: Path, session_id: str
) -> None:
    name = f"changed-{uuid.uuid4().hex[:8]}"
    blobs.write_blob(root, name, 30 * MiB, b"before")
    blobs.write_blob(tmp_path, "new", 30 * MiB, b"agent")
    reads = store.app[blobs.READS]
    assert _put(proxy, session_id, f"{store.base_url}/blobs/{name}", tmp_path / "new") == "200"
    # The write's answer does not say what it left (no ETag): undoproxy reads it once more
    # and keeps its hash, the baseline a later change is measured against.
    until(lambda: reads.count(f"/blobs/{name}") >= 2)
    someone = blobs.write_blob(root, name, 30 * MiB, b"someone else")
    [entry] = proxy.rollback(session_id)["steps"]
    assert entry["status"] == "conflict", entry
    assert blobs.sha256_of(root, name) == someone


def test_a_deleted_large_target_is_recreated_from_its_body_file(
    proxy: Undoproxy, store: ThreadedServer, root: Path, session_id: str
) -> None:
    name = f"deleted-{uuid.uuid4().hex[:8]}"
    before = blobs.write_blob(root, name, 30 * MiB, b"keep me")
    with proxy.agent(session_id) as agent:
        assert agent.delete(f"{store.base_url}/blobs/{name}").status_code == 204
    assert not (root / name).exists()
    [entry] = proxy.rollback(session_id)["steps"]
    assert entry["status"] == "compensated", entry
    assert blobs.sha256_of(root, name) == before


def test_a_target_past_max_body_is_not_snapshotted_and_the_write_not_forwarded(
    proxy: Undoproxy, store: ThreadedServer, root: Path, session_id: str
) -> None:
    name = f"huge-{uuid.uuid4().hex[:8]}"
    before = blobs.write_blob(root, name, MAX_BODY + 1, b"too big to keep")
    with proxy.agent(session_id) as agent:
        r = agent.put(f"{store.base_url}/blobs/{name}", data=b"small")
    assert r.status_code == 502
    assert r.json()["error"] == "undoproxy_snapshot_failed"
    assert f"larger than {MAX_BODY} bytes" in r.json()["detail"]
    assert blobs.sha256_of(root, name) == before
    assert _bodies(proxy) == [] or all(session_id not in str(p) for p in _bodies(proxy))


def test_a_missing_body_file_fails_the_compensation_with_the_reason(
    proxy: Undoproxy, store: ThreadedServer, root: Path, tmp_path: Path, session_id: str
) -> None:
    """Another replica's state dir, a file removed by hand: nothing is sent, the step is not
    called compensated, and the report says why."""
    name = f"lost-{uuid.uuid4().hex[:8]}"
    blobs.write_blob(root, name, 20 * MiB, b"before")
    after = blobs.write_blob(tmp_path, "new", 20 * MiB, b"agent")
    known = set(_bodies(proxy))
    assert _put(proxy, session_id, f"{store.base_url}/blobs/{name}", tmp_path / "new") == "200"
    [mine] = set(_bodies(proxy)) - known
    mine.unlink()
    [entry] = proxy.rollback(session_id)["steps"]
    assert entry["status"] != "compensated"
    assert "not in this installation's state dir" in entry["detail"]
    assert blobs.sha256_of(root, name) == after


def test_committing_a_session_removes_its_body_files(
    proxy: Undoproxy, store: ThreadedServer, root: Path, tmp_path: Path, session_id: str
) -> None:
    name = f"committed-{uuid.uuid4().hex[:8]}"
    blobs.write_blob(root, name, 20 * MiB, b"before")
    blobs.write_blob(tmp_path, "new", 20 * MiB, b"agent")
    known = set(_bodies(proxy))
    assert _put(proxy, session_id, f"{store.base_url}/blobs/{name}", tmp_path / "new") == "200"
    assert len(set(_bodies(proxy)) - known) == 1
    assert proxy.api("POST", f"/api/sessions/{session_id}/commit").status_code == 200
    assert set(_bodies(proxy)) - known == set()
