"""Matching: hosts, methods, path templates, query, headers and the rule order."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.errors import Location
from undoproxy.rules import RequestView, Rule, RuleSet
from undoproxy.rules.request import _UNPARSED

from .helpers import matcher, request, rule_set


def captures_of(match: dict[str, Any], method: str, url: str, **kw: Any) -> dict[str, str] | None:
    """The captures when the one-rule set matches, else None."""
    found = matcher(match).match(request(method, url, **kw))
    return None if found is None else found.captures


HOSTS = [
    # pattern, url, matches
    ("api.github.com", "https://api.github.com/x", True),
    ("api.github.com", "https://API.GitHub.com/x", True),
    ("API.GITHUB.COM", "https://api.github.com/x", True),
    ("api.github.com", "https://api.github.com:8443/x", True),  # port ignored unless named
    ("api.github.com", "https://uploads.github.com/x", False),
    ("api.github.com", "https://api.github.com.evil.test/x", False),
    ("*.example.com", "https://a.example.com/x", True),
    ("*.example.com", "https://a.b.example.com/x", True),
    ("*.example.com", "https://example.com/x", False),
    ("*.example.com", "https://a.example.com.evil.test/x", False),
    ("api-?.example.com", "https://api-1.example.com/x", True),
    ("api-[ab].example.com", "https://api-b.example.com/x", True),
    ("api-[ab].example.com", "https://api-c.example.com/x", False),
    ("api.example.test:8443", "https://api.example.test:8443/x", True),
    ("api.example.test:8443", "https://api.example.test/x", False),
    ("api.example.test:443", "https://api.example.test/x", True),  # default port filled in
    ("api.example.test:80", "http://api.example.test/x", True),
    ("*.example.test:8443", "https://a.example.test:8443/x", True),
    ("*.example.test:8443", "https://a.example.test:9443/x", False),
    ("127.0.0.1", "http://127.0.0.1:5000/x", True),
    ("[::1]:5000", "http://[::1]:5000/x", True),
    ("[::1]:5000", "http://[::1]:5001/x", False),
    (["a.test", "b.test"], "https://b.test/x", True),
    (["a.test", "*.b.test"], "https://x.b.test/x", True),
    (["a.test", "*.b.test"], "https://c.test/x", False),
]


@pytest.mark.parametrize(("host", "url", "expected"), HOSTS)
def test_host(host: Any, url: str, expected: bool) -> None:
    assert (captures_of({"host": host}, "GET", url) is not None) is expected


METHODS = [
    ("POST", "POST", True),
    ("post", "POST", True),
    ("POST", "post", True),
    ("POST", "PUT", False),
    (["PUT", "PATCH"], "PATCH", True),
    (["PUT", "PATCH"], "DELETE", False),
]


@pytest.mark.parametrize(("method", "sent", "expected"), METHODS)
def test_method(method: Any, sent: str, expected: bool) -> None:
    found = captures_of({"method": method}, sent, "https://a.test/")
    assert (found is not None) is expected


PATHS: list[tuple[str, str, dict[str, str] | None]] = [
    ("/repos/{owner}/{repo}/issues", "/repos/acme/web/issues", {"owner": "acme", "repo": "web"}),
    ("/repos/{owner}/{repo}/issues", "/repos/acme/web/issues/", {"owner": "acme", "repo": "web"}),
    ("/repos/{owner}/{repo}/issues/", "/repos/acme/web/issues", {"owner": "acme", "repo": "web"}),
    ("/repos/{owner}/{repo}/issues", "/repos/acme/issues", None),
    ("/repos/{owner}/{repo}/issues", "/repos/acme/web/issues/1", None),
    (
        "/repos/{owner}/{repo}/issues",
        "/repos/acme/web/issues?state=open",
        {"owner": "acme", "repo": "web"},
    ),
    ("/contacts/{id}", "/contacts/42", {"id": "42"}),
    ("/contacts/{id}", "/contacts/", None),
    ("/contacts/{id}", "/contacts", None),
    ("/contacts/{id}", "/contacts/a%2Fb", {"id": "a%2Fb"}),  # encoded slash stays one segment
    ("/files/{name}.json", "/files/report.json", {"name": "report"}),
    ("/files/{name}.json", "/files/report.csv", None),
    ("/v{version}/items", "/v2/items", {"version": "2"}),
    ("/repos/*/issues", "/repos/acme/issues", {}),
    ("/repos/*/issues", "/repos/acme/web/issues", None),
    ("/items/*", "/items/", None),
    ("/files/*.json", "/files/a.json", {}),
    ("/admin/**", "/admin", {}),
    ("/admin/**", "/admin/", {}),
    ("/admin/**", "/admin/users/1/delete", {}),
    ("/admin/**", "/administrator", None),
    ("/a/**/z", "/a/z", {}),
    ("/a/**/z", "/a/b/c/z", {}),
    ("/a/**/z", "/a/b/c", None),
    ("/**", "/anything/at/all", {}),
    ("/", "/", {}),
    ("/", "/x", None),
    ("/Repos", "/repos", None),  # paths are case-sensitive
    ("/admin/**", "/x/../admin/users", {}),  # dot segments resolved before matching
    ("/admin/**", "/%61dmin/users", {}),  # unreserved escapes decoded before matching
    ("/users/{id}", "/users/%7Ejo", {"id": "~jo"}),
]


@pytest.mark.parametrize(("path", "sent", "expected"), PATHS)
def test_path(path: str, sent: str, expected: dict[str, str] | None) -> None:
    assert captures_of({"path": path}, "GET", "https://a.test" + sent) == expected


QUERY = [
    ({"state": "open"}, "?state=open", True),
    ({"state": "open"}, "?state=closed", False),
    ({"state": "open"}, "", False),
    ({"page": 2}, "?page=2", True),  # operands compare as text
    ({"dry_run": True}, "?dry_run=true", True),
    ({"page": {"gt": 10}}, "?page=11", True),
    ({"page": {"gt": 10}}, "?page=9", False),
    ({"page": {"gt": 10}}, "?page=ten", False),
    ({"q": {"regex": "^rm "}}, "?q=rm%20-rf", True),
    ({"q": {"contains": "drop"}}, "?q=please+drop+table", True),
    ({"tag": {"eq": "b"}}, "?tag=a&tag=b", True),  # any value of a repeated parameter
    ({"tag": {"ne": "b"}}, "?tag=a&tag=b", False),
    ({"tag": {"ne": "b"}}, "?tag=a", True),
    ({"tag": {"in": ["x", "a"]}}, "?tag=a", True),
    ({"flag": {"exists": True}}, "?flag", True),
    ({"flag": {"exists": False}}, "?flag", False),
    ({"flag": {"exists": False}}, "?other=1", True),
    ({"a": "1", "b": "2"}, "?a=1&b=2", True),
    ({"a": "1", "b": "2"}, "?a=1&b=3", False),
]


@pytest.mark.parametrize(("query", "sent", "expected"), QUERY)
def test_query(query: dict[str, Any], sent: str, expected: bool) -> None:
    assert (captures_of({"query": query}, "GET", "https://a.test/x" + sent) is not None) is expected


HEADERS = [
    ({"Content-Type": "application/json"}, {"content-type": "application/json"}, True),
    ({"content-type": "application/json"}, {"Content-Type": "application/json"}, True),
    (
        {"Content-Type": {"regex": "^application/json"}},
        {"Content-Type": "application/json; charset=utf-8"},
        True,
    ),
    ({"Content-Type": "application/json"}, {"Content-Type": "text/plain"}, False),
    ({"X-Dry-Run": {"exists": True}}, {}, False),
    ({"X-Dry-Run": {"exists": False}}, {}, True),
    ({"X-Retries": {"lte": 3}}, {"X-Retries": "3"}, True),
    ({"Accept": {"contains": "json"}}, {"Accept": "text/html, application/json"}, True),
]


@pytest.mark.parametrize(("headers", "sent", "expected"), HEADERS)
def test_headers(headers: dict[str, Any], sent: dict[str, str], expected: bool) -> None:
    found = captures_of({"headers": headers}, "GET", "https://a.test/", headers=sent)
    assert (found is not None) is expected


def test_repeated_headers_are_joined() -> None:
    rules = matcher({"headers": {"accept": "a, b"}})
    req = request("GET", "https://a.test/")
    assert rules.match(req) is None
    joined = RequestView.from_parts(
        "GET", "https://a.test/", [("Accept", "a"), ("ACCEPT", "b")], b""
    )
    assert rules.match(joined) is not None


def test_every_given_key_must_hold() -> None:
    match = {
        "host": "api.github.com",
        "method": "POST",
        "path": "/repos/{owner}/{repo}/issues",
        "query": {"draft": "false"},
        "headers": {"x-tenant": "acme"},
        "body": {"$.title": {"exists": True}},
    }
    url = "https://api.github.com/repos/o/r/issues?draft=false"
    ok: dict[str, Any] = {"url": url, "body": {"title": "t"}, "headers": {"X-Tenant": "acme"}}
    assert captures_of(match, "POST", ok["url"], body=ok["body"], headers=ok["headers"]) == {
        "owner": "o",
        "repo": "r",
    }
    for broken in (
        {"method": "PUT"},
        {"url": url.replace("api.", "uploads.")},
        {"url": url.replace("draft=false", "draft=true")},
        {"headers": {"X-Tenant": "other"}},
        {"body": {"body": "no title"}},
    ):
        case = {"method": "POST", **ok, **broken}
        method = str(case.pop("method"))
        assert captures_of(match, method, str(case.pop("url")), **case) is None, broken


def test_no_match_block_matches_everything() -> None:
    rules = rule_set({}, {"match": {}})
    found = rules.match(request("DELETE", "http://anything.test:9999/a/b?c=d"))
    assert found is not None and found.rule.name == "r0"
    assert found.captures == {}


def test_first_match_wins() -> None:
    rules = rule_set(
        {"match": {"host": "api.github.com", "method": "DELETE"}, "action": "deny"},
        {"match": {"host": "*.github.com", "path": "/repos/{owner}/**"}, "action": "hold"},
        {"match": {"host": "api.github.com"}, "action": "allow"},
        {"action": "hold"},
    )
    cases = [
        ("DELETE", "https://api.github.com/repos/a/b", "r0"),
        ("POST", "https://api.github.com/repos/a/b", "r1"),
        ("POST", "https://api.github.com/user", "r2"),
        ("POST", "https://example.test/", "r3"),
    ]
    for method, url, name in cases:
        found = rules.match(request(method, url))
        assert found is not None and found.rule.name == name, (method, url)


def test_empty_rule_set_matches_nothing() -> None:
    assert RuleSet([]).match(request("POST", "https://a.test/")) is None


def test_hand_built_rule_matches_everything() -> None:
    rule = Rule(name="all", where=Location("x.yaml", 1))
    found = RuleSet([rule]).match(request("PUT", "https://a.test/x"))
    assert found is not None and found.rule is rule


def test_body_is_parsed_only_when_a_candidate_needs_it() -> None:
    rules = rule_set(
        {"match": {"host": "a.test", "body": {"$.x": {"eq": 1}}}},
        {"match": {"host": "b.test"}},
    )
    fresh = request("POST", "https://b.test/", body={"x": 1})
    assert rules.match(fresh) is not None
    assert fresh._json is _UNPARSED
    other = request("POST", "https://a.test/", body={"x": 1})
    assert rules.match(other) is not None
    assert other._json == {"x": 1}


# A body with a key twice is read last-wins by Python and most servers, first-wins by some:
# {"amount": 100000, "amount": 1} must not pass an allow rule for small amounts, nor slip
# under a hold rule for large ones.
AMBIGUOUS = b'{"amount": 100000, "amount": 1}'


@pytest.mark.parametrize(
    ("action", "condition", "matches"),
    [
        ("hold", {"gt": 1000}, True),
        ("deny", {"gt": 1000}, True),
        ("hold", {"lt": 0}, True),  # even when no reading of the body satisfies it
        ("allow", {"lte": 100}, False),
        ("allow", {"gt": 1000}, False),
    ],
)
def test_a_body_with_duplicate_keys_matches_only_rules_that_stop_it(
    action: str, condition: dict[str, Any], matches: bool
) -> None:
    rules = rule_set(
        {"action": action, "match": {"method": "POST", "body": {"$.amount": condition}}}
    )
    req = request("POST", "https://pay.test/charges", AMBIGUOUS)
    assert req.duplicate_keys == ("amount",)
    assert (rules.match(req) is not None) is matches
    [verdict] = rules.explain(req)
    assert verdict.matched is matches
    if not matches:
        assert "duplicate keys (amount)" in " ".join(verdict.reasons)


def test_duplicate_keys_are_found_in_nested_objects_only_where_repeated() -> None:
    req = request("POST", "https://x.test/", b'{"a": {"b": 1, "b": 2}, "c": [{"d": 1}, {"d": 2}]}')
    assert req.duplicate_keys == ("b",)
    assert request("POST", "https://x.test/", {"a": 1, "b": 1}).duplicate_keys == ()


@pytest.mark.parametrize("method", ["MKCOL", "MOVE", "PROPPATCH", "LOCK", "PURGE", "MKCALENDAR"])
def test_rules_can_name_webdav_and_other_registered_methods(method: str) -> None:
    assert captures_of({"method": method, "path": "/dav/{name}"}, method, "https://d.test/dav/a")
