"""Every list through a real undoproxy comes a page at a time with its total: the API, the
CLI and the page (issue 27)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

READS = 205  # steps of the long session: more than one export page (200)
SESSIONS = 103  # sessions in all: more than one page of the Sessions view (100)


@pytest.fixture(scope="module")
def up(
    tmp_path_factory: pytest.TempPathFactory, tls_upstream: ThreadedServer
) -> Iterator[Undoproxy]:
    """An undoproxy of its own: a long session, and SESSIONS sessions in all."""
    instance = Undoproxy(tmp_path_factory.mktemp("paging")).start()
    with instance.agent("long") as agent:
        for i in range(READS):
            agent.get(f"{tls_upstream.base_url}/echo/{i}").raise_for_status()
    for n in range(SESSIONS - 1):
        assert instance.api("POST", "/api/sessions", json={"id": f"p{n:03d}"}).ok
    yield instance
    instance.stop()


def _all(up: Undoproxy, path: str, key: str, limit: int) -> tuple[list[dict[str, Any]], int]:
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = f"{'&' if '?' in path else '?'}limit={limit}" + (
            f"&cursor={cursor}" if cursor else ""
        )
        answer = up.api("GET", path + query).json()
        seen += answer[key]
        cursor = answer["next"]
        if cursor is None:
            return seen, answer["total"]


def test_sessions_and_steps_come_a_page_at_a_time(up: Undoproxy) -> None:
    first = up.api("GET", "/api/sessions").json()
    assert (len(first["sessions"]), first["total"]) == (100, SESSIONS) and first["next"]
    sessions, total = _all(up, "/api/sessions", "sessions", 40)
    assert total == SESSIONS and len({s["id"] for s in sessions}) == SESSIONS
    long = next(s for s in sessions if s["id"] == "long")
    assert (long["steps"], long["mutations"], long["held"]) == (READS, 0, 0)
    steps, total = _all(up, "/api/sessions/long", "steps", 60)
    assert total == READS and [s["seq"] for s in steps] == list(range(1, READS + 1))
    newest = up.api("GET", "/api/sessions/long?order=desc&limit=3").json()
    assert [s["seq"] for s in newest["steps"]] == [READS, READS - 1, READS - 2]
    assert newest["total"] == READS and newest["state"] == "open"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/api/sessions?limit=0", "limit must be a number from 1 to 1000"),
        ("/api/sessions?limit=1001", "limit must be a number from 1 to 1000"),
        ("/api/sessions/long?limit=x", "limit must be a number from 1 to 1000"),
        ("/api/approvals?limit=1001", "limit must be a number from 1 to 1000"),
        ("/api/sessions?cursor=bm90IG1pbmU", "cursor: not a cursor of this list"),
        ("/api/sessions/long?cursor=WyJ4Il0", "cursor: not a cursor of this list"),
        ("/api/sessions/long?order=sideways", "order must be asc or desc"),
    ],
)
def test_a_bad_page_is_a_clear_400(up: Undoproxy, path: str, why: str) -> None:
    r = up.api("GET", path)
    assert r.status_code == 400 and why in r.json()["message"], r.text


def test_the_limit_itself_is_a_page(up: Undoproxy) -> None:
    assert len(up.api("GET", "/api/sessions?limit=1000").json()["sessions"]) == SESSIONS


def test_the_cli_follows_pages_and_show_prints_the_newest(up: Undoproxy) -> None:
    listed = up.cli("sessions", "--json")
    assert len(json.loads(listed.stdout)) == SESSIONS
    few = up.cli("sessions", "--limit", "5")
    assert f"the newest 5 of {SESSIONS} sessions" in few.stdout
    shown = up.cli("show", "long", "--limit", "10")
    assert shown.returncode == 0, shown.stderr
    assert f"the newest 10 of {READS} steps" in shown.stdout
    assert f"/echo/{READS - 1}" in shown.stdout and "/echo/0 " not in shown.stdout
    every = json.loads(up.cli("show", "long", "--all", "--json").stdout)
    assert len(every["steps"]) == READS == every["total"]
    assert up.cli("show", "long", "--limit", "0").returncode == 2


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "har", "md"])
def test_an_export_of_several_pages_is_whole(up: Undoproxy, fmt: str) -> None:
    done = up.cli("export", "long", "--format", fmt)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    if fmt == "jsonl":
        assert [json.loads(line)["seq"] for line in text.splitlines()] == list(range(1, READS + 1))
    elif fmt == "csv":
        assert len(text.splitlines()) == READS + 1
    elif fmt == "har":
        assert len(json.loads(text)["log"]["entries"]) == READS
    else:
        assert f"- steps: {READS} (0 mutations)" in text
        assert text.count("\n| ") == READS + 1  # the header row and one per step


def test_the_page_shows_a_page_of_sessions_with_a_link_to_the_rest(up: Undoproxy) -> None:
    key = up.api("POST", "/api/signin", json={"name": "tester"}).json()["key"]
    page = requests.get(
        f"{up.admin_url}/sessions?partial=1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert page.status_code == 200
    assert f"100 of {SESSIONS} sessions on this page" in page.text
    older = page.text.split('class="pager-older"')[0].rsplit('href="', 1)[1].split('"')[0]
    rest = requests.get(
        f"{up.admin_url}{older.replace('&amp;', '&')}&partial=1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert rest.status_code == 200 and rest.text.count("data-session=") == SESSIONS - 100
    timeline = requests.get(
        f"{up.admin_url}/sessions/long?partial=1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert f"<dd>{READS}</dd>" in timeline.text
