"""plan_for: which compensation a mutation gets, and what is snapshotted for it."""

from __future__ import annotations

from typing import Any

import pytest

from undoproxy.compensators.plan import plan_for
from undoproxy.errors import Location
from undoproxy.rules import Rule, SnapshotSpec

from .helpers import API, plan, request

URL = f"{API}/contacts/7?notify=1"
METHODS = ("PUT", "PATCH", "DELETE", "POST")
MATCH = "match: {host: crm.example.test}\n"

# Each form a rule's `compensate:` can take, keyed by a short id.
RULES: dict[str, str | None] = {
    "no-rule": None,
    "absent": MATCH,
    "none": MATCH + "compensate: none",
    "restore": MATCH + "compensate: restore",
    "recreate": MATCH + "compensate: recreate",
    "delete-created": MATCH + "compensate: delete-created",
    "pack": MATCH + "compensate: github.close-issue",
    "template": MATCH + "compensate: {method: DELETE, url: '/contacts/${response.body.id}'}",
    "template-snapshot": MATCH
    + "compensate: {method: PUT, url: /contacts/7, body: '${snapshot.body}'}",
}

# The documented inference of `defaults.compensate: auto`: (kind, snapshot URL).
INFERRED = {
    "PUT": ("restore", URL),
    "PATCH": ("restore", URL),
    "DELETE": ("recreate", URL),
    "POST": ("delete-created", None),
}

# What a rule that names its compensation gets, whatever the method and the defaults.
NAMED = {
    "restore": ("restore", URL),
    "recreate": ("recreate", URL),
    "delete-created": ("delete-created", None),
    "pack": ("github.close-issue", None),
    "template": ("template", None),
    "template-snapshot": ("template", URL),
}


def _expected(form: str, method: str, auto: bool) -> tuple[str, str | None, bool]:
    """(kind, snapshot URL, inferred) as the docs promise."""
    if form == "none":
        return "irreversible", None, False
    if form in NAMED:
        kind, url = NAMED[form]
        return kind, url, False
    if not auto:
        return "irreversible", None, False
    kind, url = INFERRED[method]
    return kind, url, True


COMBINATIONS = [
    pytest.param(form, method, auto, id=f"{form}-{method}-{'auto' if auto else 'none'}")
    for form in RULES
    for method in METHODS
    for auto in (True, False)
]


@pytest.mark.parametrize(("form", "method", "auto"), COMBINATIONS)
def test_every_combination_of_rule_method_and_defaults(form: str, method: str, auto: bool) -> None:
    got = plan(RULES[form], method, URL, {"name": "Ada"}, auto=auto)
    assert (got.kind, got.snapshot_url, got.inferred) == _expected(form, method, auto)
    assert got.irreversible == (got.kind == "irreversible")
    if got.irreversible:
        assert got.reason
    else:
        assert got.reason is None


def test_template_plan_keeps_the_rules_template() -> None:
    got = plan(RULES["template"], "POST", URL)
    assert got.template == {"method": "DELETE", "url": "/contacts/${response.body.id}"}


@pytest.mark.parametrize(
    ("rule_text", "method", "auto", "reason"),
    [
        pytest.param(
            None,
            "PUT",
            False,
            "no rule gives a compensation and defaults.compensate is none",
            id="defaults-none",
        ),
        pytest.param(
            MATCH,
            "PATCH",
            False,
            "no rule gives a compensation and defaults.compensate is none",
            id="rule-without-compensate-defaults-none",
        ),
        pytest.param(None, "PURGE", True, "no compensation is known for PURGE", id="odd-method"),
        pytest.param(None, "GET", True, "no compensation is known for GET", id="read"),
        pytest.param(
            "name: keep-forever\n" + MATCH + "compensate: none",
            "DELETE",
            True,
            "rule keep-forever says compensate: none",
            id="compensate-none",
        ),
    ],
)
def test_irreversible_plans_say_why(
    rule_text: str | None, method: str, auto: bool, reason: str
) -> None:
    got = plan(rule_text, method, URL, auto=auto)
    assert got.irreversible
    assert got.reason == reason


SNAPSHOT_URLS: list[Any] = [
    pytest.param(
        """
        match: {host: crm.example.test, path: "/contacts/{id}/email"}
        snapshot: {url: "/contacts/{id}"}
        compensate: restore
        """,
        "PUT",
        f"{API}/contacts/7/email?notify=1",
        None,
        ("restore", f"{API}/contacts/7"),
        id="relative-with-capture",
    ),
    pytest.param(
        """
        match: {host: crm.example.test, path: "/contacts/{id}/email"}
        snapshot: {url: "/contacts/{id}"}
        compensate: restore
        """,
        "PUT",
        "http://crm.example.test:8443/contacts/7/email",
        None,
        ("restore", "http://crm.example.test:8443/contacts/7"),
        id="relative-keeps-scheme-and-port",
    ),
    pytest.param(
        """
        match: {host: crm.example.test, path: "/contacts/{id}/email"}
        snapshot: {url: "https://crm.example.test/v2/contacts/{id}"}
        compensate: restore
        """,
        "PUT",
        f"{API}/contacts/7/email",
        None,
        ("restore", "https://crm.example.test/v2/contacts/7"),
        id="absolute",
    ),
    pytest.param(
        """
        match: {host: crm.example.test, path: "/contacts/{id}"}
        snapshot: {url: "/contacts/{id}?fields=all"}
        compensate: recreate
        """,
        "DELETE",
        f"{API}/contacts/7",
        None,
        ("recreate", f"{API}/contacts/7?fields=all"),
        id="with-query",
    ),
    pytest.param(
        """
        match: {host: crm.example.test, path: /contacts}
        snapshot: {url: "/contacts/${request.body.id}"}
        compensate: restore
        """,
        "PUT",
        f"{API}/contacts",
        {"id": 7, "name": "Ada"},
        ("restore", f"{API}/contacts/7"),
        id="from-request-body",
    ),
    pytest.param(
        """
        match: {host: crm.example.test}
        snapshot: true
        compensate: restore
        """,
        "PATCH",
        URL,
        None,
        ("restore", URL),
        id="snapshot-true-is-the-request-url",
    ),
    pytest.param(
        """
        match: {host: crm.example.test, path: "/contacts/{id}/email"}
        snapshot: {url: "/contacts/{id}"}
        """,
        "PATCH",
        f"{API}/contacts/7/email",
        None,
        ("restore", f"{API}/contacts/7"),
        id="inferred-uses-the-rules-snapshot",
    ),
    pytest.param(
        """
        match: {host: crm.example.test, path: "/contacts/{id}/email"}
        snapshot: {url: "/contacts/{id}"}
        compensate: {method: PUT, url: "/contacts/{id}", body: "${snapshot.body}"}
        """,
        "PUT",
        f"{API}/contacts/7/email",
        None,
        ("template", f"{API}/contacts/7"),
        id="template",
    ),
    pytest.param(
        """
        match: {host: crm.example.test}
        snapshot: true
        compensate: delete-created
        """,
        "POST",
        f"{API}/contacts",
        {"name": "Ada"},
        ("delete-created", f"{API}/contacts"),
        id="delete-created-with-snapshot",
    ),
]


@pytest.mark.parametrize(("rule_text", "method", "url", "body", "expected"), SNAPSHOT_URLS)
def test_snapshot_url(
    rule_text: str, method: str, url: str, body: Any, expected: tuple[str, str]
) -> None:
    got = plan(rule_text, method, url, b"" if body is None else body)
    assert (got.kind, got.snapshot_url) == expected


TEMPLATE = {"method": "PUT", "url": "/contacts/7", "body": "${snapshot.body}"}


@pytest.mark.parametrize(
    "compensate",
    [
        pytest.param("restore", id="restore"),
        pytest.param("recreate", id="recreate"),
        pytest.param(TEMPLATE, id="template"),
        pytest.param(None, id="inferred"),
    ],
)
def test_snapshot_url_with_an_unknown_capture_is_irreversible(
    compensate: str | dict[str, Any] | None,
) -> None:
    # Rules loaded from YAML cannot name a capture their path lacks; built by hand they can.
    r = Rule(
        name="r",
        where=Location("rule.yaml", 1),
        compensate=compensate,
        snapshot=SnapshotSpec("/contacts/{nope}"),
    )
    got = plan_for(request("PUT", f"{API}/contacts/7"), r, {"id": "7"}, auto=True)
    assert got.irreversible
    assert got.reason == "the snapshot URL cannot be built: {nope}: no such path capture"


@pytest.mark.parametrize(
    "compensate",
    [
        pytest.param("compensate: restore", id="restore"),
        pytest.param("compensate: recreate", id="recreate"),
        pytest.param("", id="inferred"),
    ],
)
def test_snapshot_url_from_a_request_body_value_that_is_missing_is_irreversible(
    compensate: str,
) -> None:
    # This rule is valid: the request body is known before forwarding. This request lacks it.
    rule_text = f"""
        match: {{host: crm.example.test, path: /contacts}}
        snapshot: {{url: "/contacts/${{request.body.id}}"}}
        {compensate}
        """
    got = plan(rule_text, "PUT", f"{API}/contacts", {"name": "Ada"})
    assert got.irreversible
    assert got.reason == (
        "the snapshot URL cannot be built: ${request.body.id}: no value in the request body"
    )


def test_rule_from_yaml_compensate_none_wins_over_snapshot() -> None:
    got = plan(MATCH + "snapshot: true\ncompensate: none", "PUT", URL)
    assert got.irreversible
    assert got.snapshot_url is None


@pytest.mark.parametrize(
    "where",
    [
        "https://backup.example.test/v2/contacts/{id}",  # another host
        "http://crm.example.test/contacts/{id}",  # another scheme
        "https://crm.example.test:8443/contacts/{id}",  # another port
    ],
)
def test_a_snapshot_on_another_origin_makes_the_step_irreversible(where: str) -> None:
    # A read there says nothing about the resource the agent changed: it could only "verify"
    # an undo that never touched it.
    rule = f"""
        match: {{host: crm.example.test, path: "/contacts/{{id}}/email"}}
        snapshot: {{url: "{where}"}}
        compensate: restore
        """
    got = plan(rule, "PUT", f"{API}/contacts/7/email", b"")
    assert got.kind == "irreversible" and got.snapshot_url is None
    assert got.reason is not None and "another origin" in got.reason
