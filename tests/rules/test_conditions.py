"""Body conditions: every operator, JSONPaths selecting several values, non-JSON bodies."""

from __future__ import annotations

from typing import Any

import pytest
from jsonpath_ng.ext.parser import parse as jsonpath_ng_parse

from undoproxy.rules.conditions import Condition, ConditionError
from undoproxy.rules.jsonpaths import JsonPath

from .helpers import matcher, request

DOC = {
    "amount": 1500,
    "price": 9.5,
    "currency": "usd",
    "title": "Fix the login page",
    "draft": False,
    "note": None,
    "labels": ["bug", "not-urgent"],
    "items": [{"sku": "GIFT-1", "qty": 2}, {"sku": "A-2", "qty": 7}],
    "meta": {"source": "agent", "tags": {"env": "prod"}},
}

BODY = [
    # path, condition, expected
    ("$.amount", {"eq": 1500}, True),
    ("$.amount", {"eq": 1500.0}, True),
    ("$.amount", {"eq": "1500"}, False),  # JSON equality: a string is not a number
    ("$.draft", {"eq": False}, True),
    ("$.draft", {"eq": 0}, False),  # booleans are not numbers
    ("$.note", {"eq": None}, True),
    ("$.meta.tags", {"eq": {"env": "prod"}}, True),
    ("$.currency", {"ne": "eur"}, True),
    ("$.currency", {"ne": "usd"}, False),
    ("$.missing", {"ne": "usd"}, False),  # missing is not "not equal"
    ("$.labels[*]", {"ne": "bug"}, False),  # ne: NONE of the values equals
    ("$.labels[*]", {"ne": "wontfix"}, True),
    ("$.amount", {"gt": 1000}, True),
    ("$.amount", {"gt": 1500}, False),
    ("$.amount", {"gte": 1500}, True),
    ("$.amount", {"lt": 1500}, False),
    ("$.amount", {"lte": 1500}, True),
    ("$.price", {"lt": 10}, True),
    ("$.currency", {"gt": 0}, False),  # strings never compare
    ("$.draft", {"lt": 1}, False),  # nor booleans
    ("$.amount", {"gt": 1000, "lt": 2000}, True),
    ("$.items[*].qty", {"gt": 5, "lt": 10}, True),
    ("$.items[*].qty", {"gt": 2, "lt": 7}, False),  # one value must satisfy both
    ("$.currency", {"in": ["usd", "eur"]}, True),
    ("$.currency", {"in": ["gbp"]}, False),
    ("$.amount", {"in": [1500, 2000]}, True),
    ("$.title", {"contains": "login"}, True),
    ("$.title", {"contains": "logout"}, False),
    ("$.labels", {"contains": "bug"}, True),  # list membership
    ("$.labels", {"contains": "urgent"}, False),
    ("$.labels[*]", {"contains": "urgent"}, True),  # each label as a string: not-urgent
    ("$.meta", {"contains": "source"}, True),  # object key
    ("$.amount", {"contains": 1}, False),
    ("$.title", {"regex": "^Fix"}, True),
    ("$.title", {"regex": "page$"}, True),
    ("$.title", {"regex": "^page"}, False),
    ("$.amount", {"regex": "15"}, False),  # regex only looks at strings
    ("$.items[*].sku", {"regex": "^GIFT-"}, True),
    ("$.items[0].sku", {"eq": "GIFT-1"}, True),
    ("$.items[1].sku", {"eq": "GIFT-1"}, False),
    ("$.items[-1].qty", {"eq": 7}, True),
    ("$.items[?(@.qty > 5)].sku", {"eq": "A-2"}, True),
    ("$..env", {"eq": "prod"}, True),
    ("$.meta.*", {"eq": "agent"}, True),
    ("$['meta']['source']", {"eq": "agent"}, True),
    ("$.note", {"exists": True}, True),  # present with a null value
    ("$.missing", {"exists": True}, False),
    ("$.missing", {"exists": False}, True),
    ("$.note", {"exists": False}, False),
    ("$.items[*].qty", {"exists": True, "gte": 7}, True),
    ("$.missing", {"eq": None}, False),
]


@pytest.mark.parametrize(("path", "condition", "expected"), BODY)
def test_body_operator(path: str, condition: dict[str, Any], expected: bool) -> None:
    rules = matcher({"body": {path: condition}})
    assert (rules.match(request("POST", "https://a.test/", body=DOC)) is not None) is expected


NOT_JSON_BODIES = [b"", b"   ", b"title=Fix", b"{broken", b"\xff\xfe\x00"]


@pytest.mark.parametrize("body", NOT_JSON_BODIES)
@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"exists": False}, True),
        ({"exists": True}, False),
        ({"eq": "x"}, False),
        ({"ne": "x"}, False),
        ({"gt": 0}, False),
        ({"regex": "."}, False),
        ({"contains": "Fix"}, False),
        ({"in": ["x"]}, False),
    ],
)
def test_non_json_body(body: bytes, condition: dict[str, Any], expected: bool) -> None:
    rules = matcher({"body": {"$.title": condition}})
    assert (rules.match(request("POST", "https://a.test/", body=body)) is not None) is expected


@pytest.mark.parametrize(
    ("doc", "path", "condition", "expected"),
    [
        ([{"id": 1}, {"id": 2}], "$[*].id", {"eq": 2}, True),  # a top-level array
        ("just a string", "$", {"contains": "string"}, True),
        (42, "$", {"gte": 42}, True),
        (None, "$", {"eq": None}, True),  # the body `null` is JSON
        ({"a": {"b": [1, [2, 3]]}}, "$.a.b[1][0]", {"eq": 2}, True),
    ],
)
def test_unusual_json_documents(
    doc: Any, path: str, condition: dict[str, Any], expected: bool
) -> None:
    rules = matcher({"body": {path: condition}})
    assert (rules.match(request("POST", "https://a.test/", body=doc)) is not None) is expected


def test_all_body_conditions_must_hold() -> None:
    rules = matcher({"body": {"$.amount": {"gt": 1000}, "$.currency": "usd"}})
    assert rules.match(request("POST", "https://a.test/", body=DOC)) is not None
    other = {**DOC, "currency": "eur"}
    assert rules.match(request("POST", "https://a.test/", body=other)) is None


@pytest.mark.parametrize(
    ("spec", "key", "message"),
    [
        ({"equals": 1}, "equals", "unknown operator 'equals'"),
        ({"gt": "ten"}, "gt", "gt takes a number"),
        ({"lte": True}, "lte", "lte takes a number"),
        ({"in": "usd"}, "in", "in takes a list"),
        ({"regex": "(unclosed"}, "regex", "invalid regex"),
        ({"regex": 5}, "regex", "regex takes a string"),
        ({"exists": "yes"}, "exists", "exists takes true or false"),
        ({"exists": False, "eq": 1}, "exists", "cannot be combined"),
        ({}, None, "empty condition"),
        ([1, 2], None, "expected a value or {operator: value}"),
    ],
)
def test_condition_errors(spec: Any, key: str | None, message: str) -> None:
    with pytest.raises(ConditionError) as info:
        Condition.compile(spec)
    assert info.value.key == key
    assert message in str(info.value)


PATHS = [
    "$",
    "$.a",
    "$.a.b",
    "$.l[*]",
    "$.l[0]",
    "$.l[-1]",
    "$.l[-9]",
    "$.l[9]",
    "$.d[*]",
    "$.d.*",
    "$.l.*",
    "$[*]",
    "$.*",
    "$['d'].k",
    '$["d"]["k"]',
    "$.l[*].x",
    "$.l[2].x",
    "$.a.b.c",
    "$.len",
    "$.d.k.z",
]
DOCS: list[Any] = [
    {"a": None, "l": [1, 2, {"x": 3}], "d": {"k": 1, "j": [2]}, "len": 4},
    {"a": {"b": {"c": 5}}, "l": [], "d": []},
    [1, {"a": 2}, [3]],
    "text",
    7,
    None,
]


@pytest.mark.parametrize("path", PATHS)
def test_fast_jsonpath_agrees_with_jsonpath_ng(path: str) -> None:
    compiled = JsonPath(path)
    assert compiled._steps is not None, "expected the fast path"
    reference = jsonpath_ng_parse(path)
    for doc in DOCS:
        assert compiled.find(doc) == [m.value for m in reference.find(doc)], (path, doc)


@pytest.mark.parametrize(
    "path", ["$..x", "$.l[?(@.x > 1)]", "$.l[0:2]", "$.a-b", "$.l[0,1]", "$['a.b']"]
)
def test_other_jsonpaths_use_jsonpath_ng(path: str) -> None:
    doc = {"l": [{"x": 1}, {"x": 2}], "a": 1, "a.b": 3}
    expected = [m.value for m in jsonpath_ng_parse(path).find(doc)]
    assert JsonPath(path).find(doc) == expected


@pytest.mark.parametrize("path", ["labels", "$.[", "$.where", ""])
def test_invalid_jsonpath(path: str) -> None:
    with pytest.raises(ValueError):
        JsonPath(path)
