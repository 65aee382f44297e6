"""A month of agents through a real undoproxy: `undoproxy archive` and retention on a
schedule move closed sessions out, `verify` (also `--since`, `--archive`) still passes."""

from __future__ import annotations

import gzip
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    """An undoproxy of this module's own: archiving takes every closed session."""
    instance = Undoproxy(tmp_path_factory.mktemp("archive")).start()
    yield instance
    instance.stop()


def _traffic(up: Undoproxy, upstream: ThreadedServer, session: str, n: int) -> None:
    with up.agent(session) as agent:
        for i in range(n):
            agent.post(f"{upstream.base_url}/echo/{i}", json={"i": i}).raise_for_status()


def test_archive_moves_closed_sessions_out_and_verify_still_passes(
    up: Undoproxy, tls_upstream: ThreadedServer, tmp_path: Path
) -> None:
    _traffic(up, tls_upstream, "done", 2)
    _traffic(up, tls_upstream, "going-on", 1)
    assert up.cli("commit", "done").returncode == 0
    refused = up.cli("archive", "--older-than", "0s")
    assert refused.returncode == 1 and "give `to`" in refused.stderr, refused.stderr
    dry = up.cli("archive", "--older-than", "0s", "--dry-run")
    assert dry.stdout.strip() == "would archive 1 session (2 steps, 0 approvals)", dry.stdout
    done = up.cli("archive", "--older-than", "0s", "--to", str(tmp_path))
    assert done.returncode == 0, done.stderr
    [archived] = list(tmp_path.glob("undoproxy-archive-*.jsonl.gz"))
    assert done.stdout.startswith(f"archived 1 session (2 steps, 0 approvals) to {archived}")
    listed = up.cli("sessions").stdout
    assert "going-on" in listed and "done" not in listed
    assert up.api("GET", "/api/sessions/done").status_code == 404

    checked = run_cli("verify", "-c", str(up.config_path), "--archive", str(archived))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == f"archive {archived}: ok, 1 batch(es), 1 sessions, 2 steps"
    assert lines[1].startswith("ok: ") and "the chain starts after archive ar_" in lines[2]
    assert lines[3].startswith("  keyed throughout (chain key ")
    # The archive's entries are keyed: without the credentials key they cannot be checked;
    # given as a file, they are.
    keyless = tmp_path / "keyless.yaml"
    keyless.write_text(
        f"state_dir: {tmp_path / 'no-key'}\nstore:\n  path: {up.dir / 'journal.db'}\n"
    )
    unchecked = run_cli("verify", "-c", str(keyless), "--archive", str(archived))
    assert unchecked.returncode == 1, unchecked.stdout
    assert "verify was not given" in unchecked.stdout.splitlines()[0], unchecked.stdout
    assert "(no credentials key found" in unchecked.stdout
    key = str(up.state_dir / "credentials.key")
    given = run_cli("verify", "-c", str(keyless), "--archive", str(archived), "--key-file", key)
    assert given.returncode == 0, given.stdout + given.stderr
    _traffic(up, tls_upstream, "going-on", 1)  # journaled after the head verify recorded
    since = run_cli("verify", "-c", str(up.config_path), "--since", "last")
    assert since.returncode == 0 and "steps verified since head" in since.stdout, since.stdout
    assert since.stdout.splitlines()[2].startswith("  keyed since that head (chain key ")

    lines_of = gzip.decompress(archived.read_bytes()).decode().splitlines()
    forged = tmp_path / "forged.jsonl.gz"
    forged.write_bytes(gzip.compress(("\n".join(lines_of[:-2] + lines_of[-1:]) + "\n").encode()))
    failed = run_cli("verify", "-c", str(up.config_path), "--archive", str(forged))
    assert failed.returncode == 1 and failed.stdout.startswith("FAILED: "), failed.stdout


def test_verify_since_a_head_the_chain_does_not_have_is_a_clear_error(up: Undoproxy) -> None:
    result = run_cli("verify", "-c", str(up.config_path), "--since", "0" * 64)
    assert result.returncode == 1
    assert "is not in the chain: verify it all" in result.stderr
    assert "Traceback" not in result.stderr


def test_retention_archives_on_its_own(tmp_path: Path, tls_upstream: ThreadedServer) -> None:
    archives = tmp_path / "archives"
    auto = Undoproxy(
        tmp_path / "auto",
        {"retention": {"after": "1s", "archive_dir": str(archives), "every": "1s"}},
    ).start()
    try:
        _traffic(auto, tls_upstream, "short-lived", 1)
        assert auto.api("POST", "/api/sessions/short-lived/commit").status_code == 200
        deadline = time.monotonic() + 20
        while auto.api("GET", "/api/sessions/short-lived").status_code != 404:
            assert time.monotonic() < deadline, "the session was not archived"
            time.sleep(0.2)
        [archived] = list(archives.glob("*.jsonl.gz"))
        checked = run_cli("verify", "-c", str(auto.config_path), "--archive", str(archived))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        assert auto.stop() == 0
    shutil.rmtree(archives)


@pytest.mark.parametrize(
    ("retention", "error"),
    [
        ({"after": "30d"}, "give retention.archive_dir (where archives go) or retention.delete"),
        ({"after": "30d", "delete": True, "archive_dir": "x"}, "one of the two"),
        ({"after": "soon", "delete": True}, "expected a duration like 300s, 5m, 1h or 30d"),
    ],
)
def test_a_retention_config_that_cannot_work_is_refused(
    tmp_path: Path, retention: dict[str, object], error: str
) -> None:
    import yaml

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "retention": retention}))
    result = run_cli("rules", "check", "-c", str(config))
    assert result.returncode == 2 and error in result.stderr, result.stderr


def test_a_closed_session_read_back_after_a_restart_still_refuses_mutations(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    first = Undoproxy(tmp_path / "restart").start()
    try:
        _traffic(first, tls_upstream, "closed-one", 2)
        assert first.api("POST", "/api/sessions/closed-one/commit").status_code == 200
    finally:
        assert first.stop() == 0
    again = Undoproxy(tmp_path / "restart").start()  # loads open sessions only
    try:
        with again.agent("closed-one") as agent:
            refused = agent.post(f"{tls_upstream.base_url}/echo/x", json={})
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"] == "undoproxy_session_closed"
            agent.get(f"{tls_upstream.base_url}/echo/read").raise_for_status()  # reads pass
        steps = again.steps("closed-one")
        assert [s["seq"] for s in steps][-1] == len(steps)  # numbered after the others
        assert steps[-1]["url"].endswith("/echo/read")
    finally:
        assert again.stop() == 0
