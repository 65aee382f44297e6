"""The pack kit, end to end on a real REST server (json-server from npm): a pack written from
`undoproxy packs new`'s own skeleton is proved by `undoproxy packs test`; `packs record` turns
a session into cases that `packs test` runs; a false "restored" fails the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.proc import Undoproxy, run_cli
from tests.support.rest_servers import Server, json_server
from undoproxy.errors import UndoproxyError
from undoproxy.packs import cases as casefile

DB = {"todos": [{"id": 1, "title": "first", "done": False}, {"id": 2, "title": "second"}]}


@pytest.fixture
def server() -> Iterator[Server]:
    s = json_server(DB)
    yield s
    s.stop()


def packs(*args: str, cwd: Path) -> Any:
    done = run_cli("packs", *args, cwd=cwd, timeout=180)
    return done


def test_a_pack_written_from_its_own_skeleton_is_proved_on_a_real_server(
    tmp_path: Path, server: Server
) -> None:
    made = packs("new", "todos", "--host", "127.0.0.1", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    path = tmp_path / "packs" / "todos.yaml"
    # Filling in the skeleton: this API's collection is /todos, not the example's /items.
    text = path.read_text().replace("/items", "/todos")
    cases = yaml.safe_load(text)["cases"]
    cases.append(
        {
            "name": "delete a todo",
            "request": {"method": "DELETE", "path": "/todos/2"},
            "expect": "restored",
            "check": [{"method": "GET", "path": "/todos"}],
        }
    )
    doc = yaml.safe_load(text)
    doc["cases"] = cases
    path.write_text(text.split("\ncases:")[0] + "\n" + yaml.safe_dump({"cases": cases}))

    proved = packs("test", str(path), "--against", server.base_url, "--json", cwd=tmp_path)
    assert proved.returncode == 0, proved.stdout + proved.stderr
    report, summary = proved.stdout.strip().rsplit("\n", 1)
    results = json.loads(report)
    assert [(r["case"], r["result"], r["ok"]) for r in results] == [
        ("create an item", "restored", True),
        ("update an item", "restored", True),
        ("delete a todo", "restored", True),
    ]
    assert all(r["evidence"].startswith("GET ") for r in results)
    assert summary == "3 of 3 cases as expected; 3 restored"


def test_the_skeleton_is_a_valid_pack_and_loads_through_include(tmp_path: Path) -> None:
    assert packs("new", "billing", cwd=tmp_path).returncode == 0
    (tmp_path / "config.yaml").write_text("include: [packs/billing.yaml]\n")
    checked = run_cli("rules", "check", "-c", str(tmp_path / "config.yaml"), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    explained = run_cli(
        "rules",
        "explain",
        "-c",
        str(tmp_path / "config.yaml"),
        "POST",
        "https://api.example.com/rpc",
        "--body",
        '{"method": "set", "key": "k", "value": 1}',
        cwd=tmp_path,
    )
    assert "billing/set-value" in explained.stdout
    read = "POST https://api.example.com/rpc before forwarding (compensate.read)"
    assert read in explained.stdout
    assert "read back by the same read" in explained.stdout
    again = packs("new", "billing", cwd=tmp_path)
    assert again.returncode == 1 and "--force" in again.stderr
    builtin = packs("new", "github", cwd=tmp_path)
    assert builtin.returncode == 1 and "built-in" in builtin.stderr


def test_a_false_restored_fails_the_run(tmp_path: Path, server: Server) -> None:
    """A pack that reads back the wrong thing: its rule "restores" a creation from a snapshot
    of another todo, which reads back as before; the case's check read shows the new todo still
    there, so the run fails and says so."""
    pack = {
        "name": "wrong",
        "hosts": ["127.0.0.1"],
        "rules": [
            {
                "name": "create",
                "match": {"method": "POST", "path": "/todos"},
                "snapshot": {"url": "/todos/1"},
                "compensate": "restore",
            }
        ],
        "cases": [
            {
                "name": "create",
                "request": {"method": "POST", "path": "/todos", "json": {"title": "x"}},
                "expect": "restored",
                "check": [{"method": "GET", "path": "/todos"}],
            },
            {
                "name": "create, no check",
                "request": {"method": "POST", "path": "/todos", "json": {"title": "y"}},
                "expect": "irreversible",
            },
        ],
    }
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(pack))
    ran = packs("test", str(path), "--against", server.base_url, "--json", cwd=tmp_path)
    assert ran.returncode == 1
    results = json.loads(ran.stdout.strip().rsplit("\n", 1)[0])
    assert results[0]["result"] == "NOT RESTORED, reported restored"
    assert "the check reads differ from before the request" in results[0]["notes"]
    assert (results[1]["result"], results[1]["ok"]) == ("restored", False)


def test_a_recorded_session_becomes_cases_that_packs_test_runs(
    tmp_path: Path, server: Server
) -> None:
    up = Undoproxy(tmp_path / "proxy", {"packs": []}).start()
    try:
        agent = up.agent("rec-1")
        assert agent.post(f"{server.base_url}/todos", json={"title": "new"}, timeout=30).ok
        assert agent.patch(f"{server.base_url}/todos/1", json={"done": True}, timeout=30).ok
        out = tmp_path / "cases.yaml"
        recorded = up.cli("packs", "record", "rec-1", "--out", str(out))
        assert recorded.returncode == 0, recorded.stderr
    finally:
        up.stop()
    cases = casefile.parse_cases(yaml.safe_load(out.read_text()), str(out))
    assert [(c.request.method, c.expect) for c in cases] == [
        ("POST", "restored"),
        ("PATCH", "restored"),
    ]
    pack = {
        "name": "todos",
        "hosts": ["127.0.0.1"],
        "rules": [
            {
                "name": "create",
                "match": {"method": "POST", "path": "/todos"},
                "compensate": "delete-created",
            },
            {
                "name": "update",
                "match": {"method": "PATCH", "path": "/todos/{id}"},
                "compensate": "restore",
            },
        ],
    }
    (tmp_path / "todos.yaml").write_text(yaml.safe_dump(pack))
    ran = packs(
        "test", "todos.yaml", "--cases", str(out), "--against", server.base_url, cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 of 2 cases as expected; 2 restored" in ran.stdout


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"cases": []}, "no cases"),
        ({"cases": [{"request": {"path": "/x"}}]}, "needs a method"),
        ({"cases": [{"request": {"method": "GET"}}]}, "needs a path"),
        ({"cases": [{"request": {"method": "GET", "path": "/"}, "expect": "maybe"}]}, "expect"),
        ({"cases": [{"request": {"method": "GET", "path": "/"}, "typo": 1}]}, "unknown key"),
        ({"cases": [{"request": {"method": "GET", "path": "/"}}] * 201}, "at most 200"),
    ],
)
def test_bad_cases_are_refused_with_the_reason(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(UndoproxyError, match=message):
        casefile.parse_cases(doc, "cases.yaml")


def test_two_hundred_cases_are_accepted() -> None:
    doc = {"cases": [{"request": {"method": "GET", "path": "/"}}] * 200}
    assert len(casefile.parse_cases(doc, "cases.yaml")) == 200
