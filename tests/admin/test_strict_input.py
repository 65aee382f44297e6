"""Finding 11: loose types. Booleans are JSON booleans, a JSON body never repeats a key, and
the admin token has a minimum length; each refused with a clear error, never guessed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.proc import Undoproxy, run_cli
from undoproxy.admin.errors import ApiError, json_bool, parse_json

TOKEN = "a-sixteen-char-t"


@pytest.mark.parametrize(
    ("body", "expected"),
    [({}, False), ({"force": None}, False), ({"force": True}, True), ({"force": False}, False)],
)
def test_json_bool_takes_json_booleans(body: dict[str, Any], expected: bool) -> None:
    assert json_bool(body, "force", False) is expected


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "", [], {}, "no"])
def test_json_bool_refuses_anything_else(value: object) -> None:
    with pytest.raises(ApiError) as raised:
        json_bool({"force": value}, "force", False)
    assert raised.value.status == 400 and "force must be true or false" in raised.value.message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"a": 1, "a": 2}', "a"),
        ('{"x": {"amount": 100000, "amount": 1}}', "amount"),
        ('[{"k": 1, "k": 1}]', "k"),
    ],
)
def test_parse_json_refuses_a_repeated_key_at_any_depth(text: str, key: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_json(text)
    assert raised.value.args == (key,)


def test_parse_json_keeps_distinct_keys() -> None:
    assert parse_json('{"a": {"b": 1}, "b": [1, {"a": 2}]}') == {"a": {"b": 1}, "b": [1, {"a": 2}]}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    assert len(TOKEN) == 16  # exactly the minimum
    instance = Undoproxy(tmp_path_factory.mktemp("strict"), {"admin": {"token": TOKEN}}).start()
    yield instance
    instance.stop()


@pytest.mark.parametrize(
    "body",
    [
        '{"force": "false"}',
        '{"dry_run": "true"}',
        '{"force": 0}',
        '{"dry_run": false, "dry_run": true}',
    ],
)
def test_the_api_answers_400_to_loose_booleans_and_repeated_keys(
    up: Undoproxy, session_id: str, body: str
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}  # the configured token is the one in use
    created = requests.post(
        f"{up.admin_url}/api/sessions", json={"id": session_id}, headers=auth, timeout=10
    )
    assert created.status_code == 201, created.text
    r = requests.post(
        f"{up.admin_url}/api/sessions/{session_id}/rollback",
        data=body,
        headers={**auth, "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request"
    assert "true or false" in r.json()["message"] or "repeats the key" in r.json()["message"]
    shown = requests.get(f"{up.admin_url}/api/sessions/{session_id}", headers=auth, timeout=10)
    assert shown.json()["state"] == "open"


def test_a_body_too_deep_to_parse_is_a_400_not_a_500(up: Undoproxy) -> None:
    r = requests.post(
        f"{up.admin_url}/api/sessions",
        data="[" * 100_000,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert r.json() == {"error": "bad_request", "message": "the body must be JSON"}


def _config(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        "proxy:\n  listen: 127.0.0.1:0\n"
        f"admin:\n  listen: 127.0.0.1:0\n  token: {token}\n"
        f"state_dir: {tmp_path / 'state'}\n"
    )
    return path


@pytest.mark.parametrize("command", [["rules", "check"], ["run"]])
@pytest.mark.parametrize("token", ["short", "fifteen-chars-x", "'   padded-to-16 '"])
def test_a_short_admin_token_is_a_config_error_naming_file_and_line(
    tmp_path: Path, command: list[str], token: str
) -> None:
    path = _config(tmp_path, token)
    done = run_cli(*command, "-c", str(path))
    assert done.returncode != 0
    assert f"{path}:5: admin.token: must be at least 16 characters" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state" / "admin-token").exists()  # nothing started half-way
