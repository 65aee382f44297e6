"""`undoproxy verify` against the journal of a real undoproxy, edited with the sqlite3 CLI."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.store.backends import SqliteStore
from tests.support import rest
from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer
from undoproxy.credentials import CredentialBox
from undoproxy.store import chain
from undoproxy.store.chain import ChainKey
from undoproxy.store.journal import Journal as JournalStore

SECRET = "sk-verify-SECRET"
AUTH = {"Authorization": f"Bearer {SECRET}"}
SESSION = "audit"
SQLITE3 = shutil.which("sqlite3")


@dataclass
class Journal:
    """The journal a real undoproxy left behind, and what was done to make it."""

    path: Path
    steps: int
    running_verify: subprocess.CompletedProcess[str]


def verify(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("verify", "-c", str(config), *args)


@pytest.fixture(scope="module")
def journal(
    tmp_path_factory: pytest.TempPathFactory, upstream_cert: tuple[Path, Path]
) -> Iterator[Journal]:
    """Reads, mutations and a rollback through a real undoproxy, then stopped."""
    state = rest.RestState(token=SECRET)
    state.items = {"1": {"id": "1", "name": "Ada"}, "2": {"id": "2", "name": "Grace"}}
    api: ThreadedServer = rest.serve(state, upstream_cert)
    instance = Undoproxy(tmp_path_factory.mktemp("verify")).start()
    try:
        with instance.agent(SESSION, headers=AUTH) as s:
            s.get(f"{api.base_url}/items/1").raise_for_status()
            s.post(f"{api.base_url}/items", json={"name": "Linus"}).raise_for_status()
            s.put(f"{api.base_url}/items/1", json={"name": "Ada L."}).raise_for_status()
            s.patch(f"{api.base_url}/items/2", json={"rank": "admiral"}).raise_for_status()
            s.get(f"{api.base_url}/items/2").raise_for_status()
            s.delete(f"{api.base_url}/items/1").raise_for_status()
        r = instance.api("POST", f"/api/sessions/{SESSION}/rollback", json={})
        assert r.status_code == 200 and r.json()["state"] == "rolled_back", r.text
        running = verify(instance.config_path)  # read-only, next to the running writer
        # Traffic keeps flowing while verify reads.
        with instance.agent("after", headers=AUTH) as s:
            s.get(f"{api.base_url}/items/2").raise_for_status()
        assert instance.stop() == 0
    finally:
        instance.stop()
        api.stop()
    yield Journal(instance.dir / "journal.db", 7, running)


def copy_of(journal: Journal, directory: Path, *, with_key: bool = True) -> tuple[Path, Path]:
    """A copy of the journal and a config that names it, with a copy of the credentials key
    in its state dir (verify derives the chain key from it) unless `with_key` is false."""
    db = directory / "journal.db"
    with sqlite3.connect(journal.path) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    state = directory / "state"
    state.mkdir()
    if with_key:
        shutil.copy(journal.path.parent / "state" / "credentials.key", state / "credentials.key")
    config = directory / "config.yaml"
    config.write_text(f"state_dir: {state}\nstore:\n  path: {db}\n")
    return db, config


def test_verify_while_undoproxy_runs_and_after(journal: Journal, tmp_path: Path) -> None:
    running = journal.running_verify
    assert (running.returncode, running.stdout.splitlines()[0]) == (0, "ok: 6 steps verified")
    _, config = copy_of(journal, tmp_path)
    done = verify(config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"ok: {journal.steps} steps verified"
    head = done.stdout.split("head ")[1].split()[0]
    assert done.stdout.splitlines()[2].startswith("  keyed throughout (chain key ")
    assert verify(config, "--head", head).returncode == 0
    cut = verify(config, "--head", head, "--head", "0" * 64)
    assert cut.returncode == 1
    assert cut.stdout.startswith(f"FAILED: chain {'0' * 64}: this head, recorded earlier, is no")
    with sqlite3.connect(journal.path) as db:
        statuses = {r[0] for r in db.execute("SELECT status FROM steps WHERE is_mutation=1")}
        updated = db.execute("SELECT count(*) FROM chain WHERE version > 1").fetchone()[0]
    assert statuses == {"compensated"} and updated >= 8  # outcome + rollback marks, chained


def sql(db: Path, statement: str) -> None:
    """Edit the journal the way a person would: with the sqlite3 CLI."""
    if SQLITE3:
        subprocess.run([SQLITE3, str(db), statement], check=True, capture_output=True)
    else:  # pragma: no cover - the CI image has the CLI
        with sqlite3.connect(db) as conn:
            conn.executescript(statement)


# The PUT (#3) is the step tampered with: {step} is its id, {first} and {last} the seq of its
# first and last chain entries.
TAMPERINGS = {
    "text": "UPDATE steps SET url=url || '?x' WHERE id='{step}'",
    "text same length": "UPDATE steps SET method='POST' WHERE id='{step}'",
    "text to blob": "UPDATE steps SET method=CAST(method AS BLOB) WHERE id='{step}'",
    "text to invalid utf-8": "UPDATE steps SET status=CAST(X'ff' AS TEXT) WHERE id='{step}'",
    "blob": "UPDATE steps SET request_body=X'7b7d' WHERE id='{step}'",
    "blob to NULL": "UPDATE steps SET request_body=NULL WHERE id='{step}'",
    "integer": "UPDATE steps SET response_status=201 WHERE id='{step}'",
    "integer to real": "UPDATE steps SET response_status=200.5 WHERE id='{step}'",
    "real": "UPDATE steps SET duration_ms=duration_ms + 0.000001 WHERE id='{step}'",
    "timestamp": "UPDATE steps SET created_at=created_at - 3600 WHERE id='{step}'",
    "json": "UPDATE steps SET request_headers=json_remove(request_headers, '$[0]') "
    "WHERE id='{step}'",
    "json to NULL": "UPDATE steps SET snapshot=NULL WHERE id='{step}'",
    "NULL to a value": "UPDATE steps SET intent='nothing to see' WHERE id='{step}'",
    "status": "UPDATE steps SET status='irreversible' WHERE id='{step}'",
    "delete the step": "DELETE FROM steps WHERE id='{step}'",
    "delete its first chain entry": "DELETE FROM chain WHERE seq={first}",
    "delete its last chain entry": "DELETE FROM chain WHERE seq={last}",
    "edit its first chain hash": "UPDATE chain SET hash=prev_hash WHERE seq={first}",
    "swap two chain entries": "UPDATE chain SET seq=-1 WHERE seq={first}; "
    "UPDATE chain SET seq={first} WHERE seq={first} - 1; "
    "UPDATE chain SET seq={first} - 1 WHERE seq=-1",
}


@pytest.mark.parametrize("change", TAMPERINGS.values(), ids=TAMPERINGS.keys())
def test_an_edited_step_is_named(journal: Journal, tmp_path: Path, change: str) -> None:
    db, config = copy_of(journal, tmp_path)
    with sqlite3.connect(db) as conn:
        [step] = conn.execute("SELECT id FROM steps WHERE session_id=? AND seq=3", (SESSION,))
        first, last = conn.execute(
            "SELECT min(seq), max(seq) FROM chain WHERE row_id=?", (step[0],)
        ).fetchone()
    assert last > first > 1  # chained when journaled, again when its outcome came
    sql(db, change.format(step=step[0], first=first, last=last))
    result = verify(config)
    assert result.returncode == 1, result.stdout + result.stderr
    first_line = result.stdout.splitlines()[0]
    assert first_line.startswith("FAILED: ") and step[0] in first_line, result.stdout


def test_a_step_inserted_outside_undoproxy_is_named(journal: Journal, tmp_path: Path) -> None:
    db, config = copy_of(journal, tmp_path)
    sql(
        db,
        "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, "
        "is_mutation, status) VALUES ('st_forged', 'audit', 99, 0, 0, 'GET', "
        "'https://example.test/', 0, 'succeeded')",
    )
    result = verify(config)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        "FAILED: step st_forged (session audit, #99): not in the chain: "
        "added to the database outside undoproxy"
    )


def test_an_edited_session_is_named(journal: Journal, tmp_path: Path) -> None:
    db, config = copy_of(journal, tmp_path)
    sql(db, "UPDATE sessions SET state='committed' WHERE id='audit'")
    result = verify(config)
    assert result.returncode == 1
    assert result.stdout.startswith("FAILED: session audit: its content differs")


def test_verify_without_a_journal_says_so(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path}\nstore:\n  path: {tmp_path / 'none.db'}\n")
    result = verify(config)
    assert result.returncode == 1
    assert "no journal at" in result.stderr and "Traceback" not in result.stderr


def _append(db: Path, row_id: str, prev: str, *, key_id: str | None) -> None:
    """Append an entry for a step as someone who knows the scheme but not the key would."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = dict(conn.execute("SELECT * FROM steps WHERE id=?", (row_id,)).fetchone())
        (version,) = conn.execute(
            "SELECT max(version) + 1 FROM chain WHERE row_id=?", (row_id,)
        ).fetchone()
        payload = chain.canonical("steps", row.items())
        if key_id is None:  # an entry as chains were before keys: SHA-256, anyone can
            values = (prev, chain.entry_hash(prev, payload), None, None)
        else:  # a keyed entry's columns, with the best hash one can make without the key
            values = (prev, chain.entry_hash(prev, payload), key_id, chain.row_hash(payload))
        conn.execute(
            "INSERT INTO chain (tbl, row_id, version, prev_hash, hash, key_id, row_hash) "
            "VALUES ('steps', ?, ?, ?, ?, ?, ?)",
            (row_id, version, *values),
        )


@pytest.mark.parametrize("how", ["sha256 entry", "forged keyed entry", "rebuilt tail"])
def test_a_rewritten_step_with_an_appended_entry_fails_even_with_an_earlier_head(
    journal: Journal, tmp_path: Path, how: str
) -> None:
    """The attack of issue 22: rewrite an old step and append one entry for it. Unkeyed, the
    chain stayed whole and `verify --head <earlier head>` said ok."""
    db, config = copy_of(journal, tmp_path)
    earlier = verify(config).stdout.split("head ")[1].split()[0]
    with sqlite3.connect(db) as conn:
        [step] = conn.execute("SELECT id FROM steps WHERE session_id=? AND seq=3", (SESSION,))
        key_id = conn.execute("SELECT key_id FROM chain WHERE key_id IS NOT NULL").fetchone()[0]
        if how == "rebuilt tail":  # cut the newest entries, to append a tail of one's own
            conn.execute("DELETE FROM chain WHERE seq > (SELECT max(seq) - 3 FROM chain)")
        (head,) = conn.execute("SELECT hash FROM chain ORDER BY seq DESC LIMIT 1").fetchone()
    sql(db, f"UPDATE steps SET url='https://attacker.test/' WHERE id='{step[0]}'")
    _append(db, step[0], head, key_id=None if how == "sha256 entry" else key_id)
    result = verify(config, "--head", earlier)
    assert result.returncode == 1, result.stdout
    first = result.stdout.splitlines()[0]
    assert first.startswith("FAILED: ") and "ok:" not in result.stdout
    if how != "rebuilt tail":  # (a cut tail first loses the head recorded before it)
        assert step[0] in first, first


def test_verify_needs_the_key_and_takes_an_older_one_from_a_file(
    journal: Journal, tmp_path: Path
) -> None:
    _, config = copy_of(journal, tmp_path, with_key=False)
    result = verify(config)
    assert result.returncode == 1
    assert "verify was not given" in result.stdout.splitlines()[0]
    assert "(no credentials key found (UNDOPROXY_CREDENTIALS_KEY is unset" in result.stdout
    key = journal.path.parent / "state" / "credentials.key"
    assert verify(config, "--key-file", str(key)).returncode == 0


def test_a_journal_from_before_keyed_chains_says_how_far_it_is_keyed(tmp_path: Path) -> None:
    """Unkeyed, it verifies and says NOT KEYED; once an undoproxy with keys opened it, it
    says where the keyed entries begin and what covers the ones before."""
    old = SqliteStore(tmp_path)
    asyncio.run(old.before_keys())
    state = tmp_path / "state"
    box = CredentialBox.from_state_dir(state)
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {state}\nstore:\n  path: {old.path}\n")
    unkeyed = verify(config)
    assert unkeyed.returncode == 0, unkeyed.stdout
    assert unkeyed.stdout.splitlines()[0] == "ok: 2 steps verified"
    assert unkeyed.stdout.splitlines()[2].startswith("  NOT KEYED: no entry carries a key")

    async def open_and_close() -> None:
        await (await JournalStore.open(old.path, box=box)).close()

    asyncio.run(open_and_close())
    keyed = verify(config)
    assert keyed.returncode == 0, keyed.stdout
    assert keyed.stdout.splitlines()[2] == (
        f"  keyed from entry 4 on (chain key {ChainKey.of(box).id}); the 3 entries before it "
        "date from before keyed chains: checked as SHA-256, and covered by the keyed entry "
        "after them"
    )
