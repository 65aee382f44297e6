"""docs/packs.md's "Write a pack in ten minutes", run as written: the pack it builds for
etcd's v2 keys API is proved by `undoproxy packs test` against a real etcd, and what it says
zero rules do is what they do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.rollback.helpers import statuses
from tests.support.proc import Undoproxy, run_cli
from tests.support.rpcservers import Etcd

DOC = (Path(__file__).resolve().parents[2] / "docs" / "packs.md").read_text(encoding="utf-8")


def tutorial_pack() -> str:
    section = DOC[DOC.index("## Write a pack in ten minutes") :]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block.startswith("name: etcd2")
    return block


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = Etcd(tmp_path_factory.mktemp("etcd-v2"), v2=True)
    server.start()
    yield server
    server.stop()


def test_the_tutorials_pack_is_proved_on_a_real_etcd(tmp_path: Path, etcd: Etcd) -> None:
    (tmp_path / "packs").mkdir()
    (tmp_path / "packs" / "etcd2.yaml").write_text(tutorial_pack())
    ran = run_cli(
        "packs", "test", "packs/etcd2.yaml", "--against", etcd.base_url, cwd=tmp_path, timeout=180
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "4 of 4 cases as expected; 3 restored" in ran.stdout
    for line in ("ok  set a new key", "ok  change a key", "ok  delete a key", "ok  append"):
        assert line in ran.stdout


def test_with_zero_rules_the_v2_api_is_reported_failed_never_compensated(
    tmp_path: Path, etcd: Etcd
) -> None:
    keys = f"{etcd.base_url}/v2/keys/zero"
    requests.put(f"{keys}/k", data={"value": "old"}, timeout=10).raise_for_status()
    up = Undoproxy(tmp_path, {"packs": []}).start()
    try:
        agent = up.agent("zero")
        assert agent.put(f"{keys}/k", data={"value": "new"}, timeout=30).ok
        report = up.rollback("zero")
    finally:
        up.stop()
    assert statuses(report) == ["failed"], report
    assert "node.value" in report["steps"][0]["detail"]


def test_without_the_setup_the_check_catches_the_directory_left_behind(
    tmp_path: Path, etcd: Etcd
) -> None:
    """What the tutorial says of its first case's `setup`: on a key whose directory did not
    exist, rollback's own read shows the key gone (true), and the check shows the directory
    etcd made by itself still there: the run fails, `NOT RESTORED, reported restored`."""
    lines = tutorial_pack().replace("/v2/keys/app/", "/v2/keys/fresh/").splitlines()
    first = lines.index(
        "    setup:                                # its directory exists (see below)"
    )
    del lines[first : first + 2]
    (tmp_path / "etcd2.yaml").write_text("\n".join(lines) + "\n")
    ran = run_cli(
        "packs", "test", "etcd2.yaml", "--against", etcd.base_url, cwd=tmp_path, timeout=180
    )
    assert ran.returncode == 1
    assert "FAIL  set a new key" in ran.stdout and "NOT RESTORED, reported restored" in ran.stdout
