"""Templates: every reference kind, whole values vs interpolation, and missing values."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.rules import (
    TemplateContext,
    TemplateError,
    render_template,
    render_url,
    template_references_response,
    template_references_snapshot,
)
from undoproxy.rules.templates import TemplateSyntaxError, parse_template

CTX = TemplateContext(
    captures={"owner": "acme", "repo": "web", "id": "42"},
    request_body={"title": "Bug", "amount": 1500, "tags": ["a", "b"], "meta": {"k": "v"}},
    response_body={"number": 17, "data": {"items": [{"id": "it_1"}, {"id": "it_2"}]}},
    response_headers={"Location": "https://api.test/things/9", "X-Count": "3"},
    snapshot_body={"name": "Ada", "email": "ada@example.test", "active": True},
)

RENDER: list[tuple[Any, Any]] = [
    # captures
    ("/repos/{owner}/{repo}/issues", "/repos/acme/web/issues"),
    ("{id}", "42"),
    # whole-value references keep their type
    ("${response.body.number}", 17),
    ("${request.body.amount}", 1500),
    ("${request.body.tags}", ["a", "b"]),
    ("${request.body.meta}", {"k": "v"}),
    ("${request.body}", CTX.request_body),
    ("${snapshot.body}", CTX.snapshot_body),
    ("${snapshot.body.active}", True),
    ("${response.body.data.items[0].id}", "it_1"),
    ("${response.body.data.items[*].id}", ["it_1", "it_2"]),  # several values: a list
    ("${response.body['number']}", 17),
    ("${response.headers.Location}", "https://api.test/things/9"),
    ("${response.headers.location}", "https://api.test/things/9"),  # case-insensitive
    ("${ response.body.number }", 17),  # spaces inside ${ } are ignored
    # interpolation yields strings; non-strings as compact JSON
    ("/repos/{owner}/{repo}/issues/${response.body.number}", "/repos/acme/web/issues/17"),
    ("count=${response.headers.X-Count}", "count=3"),
    ("tags: ${request.body.tags}", 'tags: ["a","b"]'),
    ("active=${snapshot.body.active}", "active=true"),
    ("meta ${request.body.meta}", 'meta {"k":"v"}'),
    ("${snapshot.body.name} <${snapshot.body.email}>", "Ada <ada@example.test>"),
    # escapes and plain text
    ("{{literal}} and }}", "{literal} and }"),
    ("${{x}}", "${x}"),
    ("price in $", "price in $"),
    ("no templates here", "no templates here"),
    ("", ""),
    # structures are walked; keys are not rendered; non-strings pass through
    (
        {"state": "closed", "number": "${response.body.number}", "{id}": ["{id}", 5, None]},
        {"state": "closed", "number": 17, "{id}": ["42", 5, None]},
    ),
    (3.5, 3.5),
    (None, None),
]


@pytest.mark.parametrize(("template", "expected"), RENDER)
def test_render(template: Any, expected: Any) -> None:
    assert render_template(template, CTX) == expected


MISSING = [
    ("${response.body.missing}", "${response.body.missing}: no value in the response body"),
    ("/x/${response.body.missing}", "${response.body.missing}: no value in the response body"),
    ("${request.body.nope}", "${request.body.nope}: no value in the request body"),
    ("${snapshot.body.nope[0]}", "${snapshot.body.nope[0]}: no value in the snapshot body"),
    ("${response.headers.ETag}", "${response.headers.ETag}: no ETag header in the response"),
    ("/things/{thing}", "{thing}: no such path capture"),
]


@pytest.mark.parametrize(("template", "message"), MISSING)
def test_missing_value(template: str, message: str) -> None:
    with pytest.raises(TemplateError) as info:
        render_template(template, CTX)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("${response.body.number}", "${response.body.number}: no value in the response body"),
        ("${request.body}", "${request.body}: no value in the request body"),
        ("${snapshot.body}", "${snapshot.body}: no value in the snapshot body"),
    ],
)
def test_absent_bodies(template: str, message: str) -> None:
    with pytest.raises(TemplateError) as info:
        render_template(template, TemplateContext(captures={"id": "1"}))
    assert str(info.value) == message + " (empty or not JSON)"


def test_template_error_is_a_value_error() -> None:
    assert issubclass(TemplateError, ValueError)


@pytest.mark.parametrize(
    "template",
    [
        "${response.json}",
        "${request.headers.X}",
        "{not a name}",
        "a { b",
        "a } b",
        "${request.body.[}",
    ],
)
def test_syntax_errors(template: str) -> None:
    with pytest.raises(TemplateSyntaxError):
        parse_template(template)
    with pytest.raises(TemplateError):
        render_template(template, CTX)


@pytest.mark.parametrize(
    ("value", "response", "snapshot"),
    [
        ("/x/{id}", False, False),
        ("/x/${response.body.id}", True, False),
        ({"body": ["${response.headers.Location}"]}, True, False),
        ({"body": "${snapshot.body}"}, False, True),
        ({"url": "/x", "body": {"a": "${request.body.a}"}}, False, False),
        ("restore", False, False),
        (None, False, False),
        ("broken {", False, False),
    ],
)
def test_references(value: Any, response: bool, snapshot: bool) -> None:
    assert template_references_response(value) is response
    assert template_references_snapshot(value) is snapshot


@pytest.mark.parametrize(
    ("template", "body", "expected"),
    [
        # A value from the body is one path segment: it cannot climb out of its collection.
        (
            "/items/${request.body.id}",
            {"id": "1/../../admin/root"},
            "/items/1%2F..%2F..%2Fadmin%2Froot",
        ),
        ("/items/${request.body.id}", {"id": "a b?c#d"}, "/items/a%20b%3Fc%23d"),
        ("/items/${request.body.id}", {"id": 7}, "/items/7"),
        ("/items/{id}/comments", {}, "/items/a%20b/comments"),  # captures stay as sent
        ("/search?q=${request.body.q}", {"q": "x&admin=1"}, "/search?q=x%26admin%3D1"),
        ("/search?q=${request.body.q}", {"q": ""}, "/search?q="),
        # A whole-URL reference is a URL (its origin decides where credentials may go).
        ("${request.body.target}", {"target": "https://other.test/x"}, "https://other.test/x"),
    ],
)
def test_render_url_encodes_each_value_as_one_segment(
    template: str, body: dict[str, object], expected: str
) -> None:
    ctx = TemplateContext(captures={"id": "a%20b"}, request_body=body)
    assert render_url(template, ctx) == expected


@pytest.mark.parametrize("value", ["", ".", ".."])
def test_render_url_refuses_values_that_name_the_parent(value: str) -> None:
    ctx = TemplateContext(captures={"id": value}, request_body={"id": value})
    with pytest.raises(TemplateError, match="another resource"):
        render_url("/items/${request.body.id}", ctx)
    with pytest.raises(TemplateError, match="another resource"):
        render_url("/items/{id}", ctx)


@pytest.mark.parametrize("value", [None, 5, {"a": 1}, ""])
def test_render_url_whole_reference_must_be_a_url_string(value: object) -> None:
    ctx = TemplateContext(request_body={"target": value})
    with pytest.raises(TemplateError, match="not a URL"):
        render_url("${request.body.target}", ctx)
