"""What rollback agrees to send: checked requests, credentials only to the step's origin."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from undoproxy.compensators.record import InverseRequest
from undoproxy.rollback.outgoing import (
    NotSendable,
    compensation_request,
    read_request,
    resource_url,
)

STEP = "https://api.example.test/items/7"
CREDS = {"Authorization": "Bearer sk-agent"}


def record(**fields: Any) -> InverseRequest:
    return InverseRequest.of({"method": "PUT", "url": STEP, **fields})


@pytest.mark.parametrize(
    ("url", "resource"),
    [
        ("https://h/db/doc?rev=2-a", "https://h/db/doc"),
        ("https://h/db/doc?rev=2-a&batch=ok", "https://h/db/doc?batch=ok"),
        ("https://h/i/_doc/1?if_seq_no=3&if_primary_term=1", "https://h/i/_doc/1"),
        ("https://h/items?id=7", "https://h/items?id=7"),
        ("https://h/items/7", "https://h/items/7"),
    ],
)
def test_a_resource_url_drops_only_the_version_pins(url: str, resource: str) -> None:
    assert resource_url(url) == resource


@pytest.mark.parametrize(
    ("target", "sent"),
    [
        (STEP, CREDS),
        ("https://api.example.test:443/other", CREDS),
        ("https://api.example.test:8443/items/7", {}),
        ("http://api.example.test/items/7", {}),
        ("https://elsewhere.example.test/items/7", {}),
    ],
    ids=["same", "default-port", "other-port", "other-scheme", "other-host"],
)
def test_credentials_go_only_to_the_steps_origin(target: str, sent: dict[str, str]) -> None:
    out = compensation_request(record(url=target), STEP, CREDS, force=False)
    assert {k: v for k, v in out.headers.items() if k == "Authorization"} == sent
    assert {k: v for k, v in read_request(target, STEP, CREDS, None).headers.items()} == sent


def test_a_rule_may_forward_credentials_on_purpose() -> None:
    other = "https://elsewhere.example.test/x"
    out = compensation_request(record(url=other, credentials="forward"), STEP, CREDS, force=False)
    assert out.headers["Authorization"] == "Bearer sk-agent"


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        (
            {"headers": {"X-Reason": "a\r\nX-Injected: 1"}},
            "the header X-Reason contains a line break",
        ),
        ({"headers": {"Bad Name": "x"}}, "the header name 'Bad Name' is not valid"),
        ({"url": "https://user:pw@api.example.test/items/7"}, "carries credentials"),
        ({"url": "/items/7"}, "not an absolute http(s) URL"),
        ({"url": "ftp://api.example.test/items/7"}, "not an absolute http(s) URL"),
        ({"url": "https://api.example.test:99999/x"}, "the URL is not valid"),
        ({"url": "https://api.example.test/a\nb"}, "line break"),
        ({"method": "PUT X"}, "the method 'PUT X' is not valid"),
        ({"body_b64": "%%%"}, "not valid base64"),
    ],
)
def test_a_request_that_cannot_be_sent_as_recorded_is_refused(
    fields: dict[str, Any], why: str
) -> None:
    with pytest.raises(NotSendable, match=why.replace("(", r"\(").replace(")", r"\)")):
        compensation_request(record(**fields), STEP, CREDS, force=False)


def test_force_aims_at_the_resource_and_the_body_travels_with_its_type() -> None:
    body = base64.b64encode(b'{"a": 1}').decode()
    rec = record(url=f"{STEP}?rev=3-x", body_b64=body, content_type="application/json")
    out = compensation_request(rec, STEP, CREDS, force=True)
    assert (out.url, out.body, out.headers["Content-Type"]) == (
        STEP,
        b'{"a": 1}',
        "application/json",
    )
    assert compensation_request(rec, STEP, CREDS, force=False).url == f"{STEP}?rev=3-x"
