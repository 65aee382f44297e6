"""A HAR export carries the request body as the client sent it (its spacing, key order and
form encoding kept), secrets hidden in place: what a runtime really sent, not a re-rendering."""

from __future__ import annotations

import json

import pytest

from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (
            b'{"b":2,  "a" :1,"password":"hunter2"}',
            "application/json",
            '{"b":2,  "a" :1,"password":"[redacted]"}',
        ),
        (
            b"z=1&api_key=hunter2&a=2",
            "application/x-www-form-urlencoded",
            "z=1&api_key=%5Bredacted%5D&a=2",
        ),
        (b"plain text, no secret", "text/plain", "plain text, no secret"),
    ],
)
def test_har_post_data_is_the_bytes_sent_redacted(
    rt_proxy: Undoproxy,
    api_upstream: ThreadedServer,
    session_id: str,
    body: bytes,
    content_type: str,
    expected: str,
) -> None:
    with rt_proxy.agent(session_id) as s:
        s.post(
            f"{api_upstream.base_url}/echo/har", data=body, headers={"Content-Type": content_type}
        ).raise_for_status()
    har = json.loads(rt_proxy.cli("export", session_id, "--format", "har").stdout)
    [entry] = har["log"]["entries"]
    assert entry["request"]["postData"]["text"] == expected
    assert "hunter2" not in json.dumps(entry["request"])
