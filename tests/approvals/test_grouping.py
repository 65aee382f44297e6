"""Which held requests share an approval, and what the card shows of their headers."""

from __future__ import annotations

import json

import pytest

from undoproxy.approvals.grouping import (
    card_context,
    credential_tag,
    grouping_key,
    method_overrides,
    shown_headers,
)

URL = "https://api.example.test/items/7"
BASE = [("Host", "api.example.test"), ("Authorization", "Bearer sk-one"), ("Accept", "*/*")]
BODY = b'{"name": "Ada"}'
JSON = "application/json; charset=utf-8"
FORM = "application/x-www-form-urlencoded"
OVERRIDE = "X-HTTP-Method-Override"


def key(
    method: str = "POST",
    url: str = URL,
    headers: list[tuple[str, str]] | None = None,
    body: bytes | None = BODY,
) -> str:
    return grouping_key(method, url, BASE if headers is None else headers, body)


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (key(method="PUT"), "method"),
        (key(url=URL + "?x=1"), "URL"),
        (key(body=b'{"name": "Eve"}'), "body"),
        (key(body=None), "no body"),
        (key(headers=[*BASE[:1], ("Authorization", "Bearer sk-two"), *BASE[2:]]), "credential"),
        (key(headers=[*BASE, ("X-HTTP-Method-Override", "DELETE")]), "method override"),
        (key(headers=[*BASE, ("X-Method-Override", "DELETE")]), "method override"),
        (key(headers=[*BASE, ("Accept", "text/html")]), "a repeated header"),
        (key(headers=BASE[:2]), "a header fewer"),
        (key(headers=[*BASE[:2], ("Accept", "*/* ")]), "a header value's bytes"),
        (
            key(headers=[("Host", "api.example.test"), ("Authorization", "Bearer sk-one\x00")]),
            "a credential's bytes",
        ),
    ],
    # Not the keys: they are keyed hashes whose key each process draws anew, and parallel
    # workers (pytest-xdist) must collect the same test ids.
    ids=lambda value: "key" if len(value) == 64 else None,
)
def test_requests_that_differ_in_anything_forwarded_do_not_group(other: str, why: str) -> None:
    assert other != key(), why


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([(n.upper(), v) for n, v in BASE], "header names are not case-sensitive"),
        (list(reversed(BASE)), "order of different headers"),
        ([*BASE, ("Content-Length", "15")], "follows from the body"),
        ([*BASE, ("Connection", "keep-alive")], "hop-by-hop"),
        ([*BASE, ("Proxy-Authorization", "Basic eDp5")], "never forwarded"),
        ([*BASE, ("X-Undoproxy-Intent", "why")], "undoproxy's own, stripped"),
    ],
)
def test_what_the_upstream_never_sees_does_not_split_a_group(
    headers: list[tuple[str, str]], why: str
) -> None:
    assert key(headers=headers) == key(), why


def test_the_key_hides_credentials() -> None:
    k = key()
    assert len(k) == 64 and "sk-one" not in k
    assert credential_tag("Bearer sk-one") != credential_tag("Bearer sk-two")
    assert "sk-one" not in credential_tag("Bearer sk-one")
    assert len(credential_tag("x")) == 8


def test_shown_headers_redact_secrets_but_tell_them_apart() -> None:
    shown = shown_headers(
        [
            *BASE,
            ("Cookie", "sid=abc"),
            ("X-Api-Key", "k-123"),
            ("X-HTTP-Method-Override", "DELETE"),
            ("Proxy-Authorization", "Basic eDp5"),
            ("X-Undoproxy-Session", "s1"),
            ("Content-Length", "15"),
        ]
    )
    by_name = {h["name"]: h for h in shown}
    assert set(by_name) == {
        "Host",
        "Authorization",
        "Accept",
        "Cookie",
        "X-Api-Key",
        "X-HTTP-Method-Override",
        "Content-Length",
    }
    text = json.dumps(shown)
    assert "sk-one" not in text and "abc" not in text and "k-123" not in text
    auth = by_name["Authorization"]
    assert auth["secret"] and auth["value"] == f"[redacted] · {credential_tag('Bearer sk-one')}"
    accept = {"name": "Accept", "value": "*/*", "secret": False, "override": False}
    assert by_name["Accept"] == accept
    assert by_name["X-HTTP-Method-Override"]["override"] is True


def test_shown_headers_are_bounded() -> None:
    shown = shown_headers([(f"X-H{i}", "v" * 5000) for i in range(300)])
    assert len(shown) == 101 and shown[-1]["name"] == "…"
    assert all(len(h["value"]) < 2100 for h in shown)


@pytest.mark.parametrize(
    ("url", "headers", "body", "content_type", "expected"),
    [
        (URL, BASE, BODY, JSON, []),
        (URL, [(OVERRIDE, "DELETE")], None, "", [(f"header {OVERRIDE}", "DELETE")]),
        (URL, [("x-http-method", "PUT")], None, "", [("header x-http-method", "PUT")]),
        (URL, [("X-Method-Override", "PATCH")], None, "", [("header X-Method-Override", "PATCH")]),
        (URL + "?_method=DELETE", [], None, "", [("query _method", "DELETE")]),
        (URL, [], b"a=1&_method=delete", FORM, [("body _method", "delete")]),
        (URL, [], b'{"_method": "DELETE", "a": 1}', JSON, [("body _method", "DELETE")]),
        (URL, [], b'{"_method": "DELETE"}', "text/plain", []),
        (URL, [], b"not json", JSON, []),
    ],
)
def test_method_overrides_are_found_wherever_servers_look(
    url: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    content_type: str,
    expected: list[tuple[str, str]],
) -> None:
    found = method_overrides(url, headers, body, content_type)
    assert [(o["where"], o["method"]) for o in found] == expected


def test_card_context_has_headers_and_overrides() -> None:
    ctx = card_context(URL + "?_method=DELETE", [*BASE, ("X-HTTP-Method", "PUT")], None)
    assert set(ctx) == {"headers", "method_overrides"}
    assert [o["method"] for o in ctx["method_overrides"]] == ["PUT", "DELETE"]
    assert any(h["override"] for h in ctx["headers"])


def test_a_body_too_deep_to_parse_has_no_override_and_raises_nothing() -> None:
    deep = b"[" * 100_000
    assert method_overrides("https://x.test/", [], deep, "application/json") == []
    assert grouping_key("POST", "https://x.test/", [], deep)
