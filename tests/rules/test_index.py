"""The indexed `RuleSet.match` must agree with a plain first-match scan."""

from __future__ import annotations

import random
from typing import Any

import pytest

from undoproxy.rules import RequestView, RuleSet

from .helpers import request, rule_set

HOST_PATTERNS: list[Any] = [
    None,
    "api.github.com",
    "API.github.com",
    "api.stripe.com",
    "crm.example.test",
    "crm.example.test:8443",
    "*.example.test",
    "*.slack.com",
    "hooks.slack.com",
    "*",
    ["a.test", "*.b.test"],
    ["api.github.com", "api.stripe.com"],
]
METHODS: list[Any] = [None, "GET", "POST", ["PUT", "PATCH"], "DELETE", ["GET", "POST"]]
PATHS: list[Any] = [
    None,
    "/repos/{owner}/{repo}/issues",
    "/contacts/{id}",
    "/admin/**",
    "/v1/*",
    "/",
    "/v1/charges",
    "/files/{name}.json",
    "/{org}/issues",
    "/**",
    "/admin",
]
BODIES: list[Any] = [
    None,
    {"$.amount": {"gt": 100}},
    {"$.labels": {"contains": "urgent"}},
    {"$.draft": {"exists": False}},
]
QUERIES: list[Any] = [None, {"force": "true"}]

REQUEST_HOSTS = [
    "api.github.com",
    "api.stripe.com",
    "crm.example.test",
    "crm.example.test:8443",
    "x.example.test",
    "hooks.slack.com",
    "a.test",
    "deep.x.b.test",
    "other.test",
]
REQUEST_PATHS = [
    "/repos/acme/web/issues",
    "/contacts/42",
    "/admin/users/1",
    "/v1/charges",
    "/",
    "/files/report.json",
    "/nothing/here",
    "/admin",
    "/v1/",
    "/acme/issues",
]
REQUEST_BODIES: list[Any] = [
    b"",
    {"amount": 500},
    {"amount": 5, "draft": True},
    {"labels": ["urgent"]},
]


def random_rules(rng: random.Random, count: int) -> RuleSet:
    rules = []
    for _ in range(count):
        match: dict[str, Any] = {}
        for key, pool in (
            ("host", HOST_PATTERNS),
            ("method", METHODS),
            ("path", PATHS),
            ("body", BODIES),
            ("query", QUERIES),
        ):
            value = rng.choice(pool)
            if value is not None:
                match[key] = value
        rules.append({"match": match})
    return rule_set(*rules)


def random_request(rng: random.Random) -> RequestView:
    query = rng.choice(["", "?force=true", "?force=false"])
    url = (
        f"{rng.choice(['https', 'http'])}://{rng.choice(REQUEST_HOSTS)}{rng.choice(REQUEST_PATHS)}"
    )
    method = rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"])
    return request(method, url + query, body=rng.choice(REQUEST_BODIES))


def naive_match(rules: RuleSet, req: RequestView) -> tuple[str, dict[str, str]] | None:
    for rule in rules.rules:
        captures = rule.matches(req)
        if captures is not None:
            return rule.name, captures
    return None


@pytest.mark.parametrize("seed", range(3))
def test_index_agrees_with_a_plain_scan(seed: int) -> None:
    rng = random.Random(seed)
    rules = random_rules(rng, 300)
    matched = 0
    for _ in range(400):
        req = random_request(rng)
        expected = naive_match(rules, req)
        for _attempt in range(2):  # the second time comes from the candidate cache
            found = rules.match(req)
            got = None if found is None else (found.rule.name, found.captures)
            assert got == expected, req
        verdicts = rules.explain(req)
        explained = verdicts[-1] if verdicts and verdicts[-1].matched else None
        assert (explained.rule.name if explained else None) == (expected and expected[0])
        matched += expected is not None
    assert matched > 50  # the generated mix does exercise matches


def test_cache_is_bounded() -> None:
    from undoproxy.rules import match as match_module

    rules = rule_set({"match": {"host": "*.test"}})
    for i in range(match_module.CANDIDATE_CACHE_SIZE + 10):
        assert rules.match(request("GET", f"https://h{i}.test/")) is not None
    assert len(rules._cache) <= match_module.CANDIDATE_CACHE_SIZE
