"""`RequestView`: the normalized, lazily parsed picture of a request."""

from __future__ import annotations

import pytest

from undoproxy.rules import NOT_JSON, RequestView
from undoproxy.rules.request import normalize_path


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port", "path", "query"),
    [
        ("https://api.github.com/repos", "https", "api.github.com", 443, "/repos", []),
        ("http://API.Example.TEST/x", "http", "api.example.test", 80, "/x", []),
        ("HTTPS://a.test:8443", "https", "a.test", 8443, "/", []),
        ("https://a.test./x?", "https", "a.test", 443, "/x", []),
        ("http://[::1]:5000/x", "http", "::1", 5000, "/x", []),
        ("http://[::1]/x", "http", "::1", 80, "/x", []),
        ("https://user:pw@A.test:444/x", "https", "a.test", 444, "/x", []),
        ("https://a.test:/x#frag", "https", "a.test", 443, "/x", []),
        (
            "https://a.test/s?q=rm%20-rf&q=two&flag",
            "https",
            "a.test",
            443,
            "/s",
            [("q", "rm -rf"), ("q", "two"), ("flag", "")],
        ),
    ],
)
def test_from_parts(
    url: str, scheme: str, host: str, port: int, path: str, query: list[tuple[str, str]]
) -> None:
    req = RequestView.from_parts("post", url, {}, b"")
    assert (req.method, req.scheme, req.host, req.port, req.path) == (
        "POST",
        scheme,
        host,
        port,
        path,
    )
    assert req.query == query
    assert req.url == url


@pytest.mark.parametrize(
    "url",
    [
        "/relative",
        "ftp://a.test/x",
        "https:///nohost",
        "https://a.test:99999/",
        "https://a.test:0/",
        "https://a.test:12ab/",
        "https://[::1/",
        "https://[::1]x/",
        "https://user@/x",
    ],
)
def test_rejects_what_is_not_an_absolute_http_url(url: str) -> None:
    with pytest.raises(ValueError):
        RequestView.from_parts("GET", url, {}, b"")


def test_headers_lower_case_and_joined() -> None:
    pairs = [("Accept", "a"), ("X-Trace", "1"), ("ACCEPT", "b")]
    req = RequestView.from_parts("GET", "https://a.test/", pairs, b"")
    assert req.headers == {"accept": "a, b", "x-trace": "1"}
    mapping = RequestView.from_parts("GET", "https://a.test/", {"Content-Type": "x/y"}, b"")
    assert mapping.headers == {"content-type": "x/y"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"a": 1}', {"a": 1}),
        (b"[1, 2]", [1, 2]),
        (b"null", None),
        (b'"s"', "s"),
        (b"", NOT_JSON),
        (b" \n", NOT_JSON),
        (b"a=1&b=2", NOT_JSON),
        (b"{not json", NOT_JSON),
        (b"\xff\xfe\xfd", NOT_JSON),
        (b"[" * 100_000, NOT_JSON),  # too deep for the parser: still no exception
    ],
)
def test_json(body: bytes, expected: object) -> None:
    req = RequestView.from_parts("POST", "https://a.test/", {}, body)
    assert req.json == expected or req.json is expected
    assert req.json is req.json  # parsed once


def test_not_json_is_falsy_and_named() -> None:
    assert not NOT_JSON
    assert repr(NOT_JSON) == "NOT_JSON"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("", "/"),
        ("/a/b", "/a/b"),
        ("/a/./b", "/a/b"),
        ("/a/../b", "/b"),
        ("/../../b", "/b"),
        ("/a/b/..", "/a/"),
        ("/a/b/.", "/a/b/"),
        ("/%61dmin", "/admin"),
        ("/a%2fb", "/a%2Fb"),  # reserved escapes stay, upper-cased
        ("/%7euser", "/~user"),
        ("/a%20b", "/a%20b"),
    ],
)
def test_normalize_path(path: str, expected: str) -> None:
    assert normalize_path(path) == expected


@pytest.mark.parametrize(
    ("url", "relative", "expected"),
    [
        ("https://a.test/x/y", "/contacts/1", "https://a.test/contacts/1"),
        ("https://a.test:8443/x", "/c", "https://a.test:8443/c"),
        ("http://a.test:80/x", "/c", "http://a.test/c"),
        ("https://a.test/x", "https://b.test/z", "https://b.test/z"),
        ("http://[::1]:5000/x", "/c", "http://[::1]:5000/c"),
    ],
)
def test_resolve(url: str, relative: str, expected: str) -> None:
    assert RequestView.from_parts("GET", url, {}, b"").resolve(relative) == expected
