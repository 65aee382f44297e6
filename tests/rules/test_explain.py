"""`rules explain`: the verdicts and the text a user reads."""

from __future__ import annotations

import pytest

from undoproxy.rules import RuleSet, format_explanation

from .conftest import LoadRules
from .helpers import request

CONFIG = """
rules:
  - name: block-deletes
    match: {host: api.github.com, method: DELETE}
    action: deny
    reason: agents may not delete on GitHub
  - name: urgent-issues
    match:
      host: api.github.com
      method: POST
      path: /repos/{owner}/{repo}/issues
      body:
        "$.labels": {contains: urgent}
    risk: high
    action: hold
    timeout: 2m
  - name: create-issue
    description: every issue an agent opens is closed again on rollback
    match:
      host: api.github.com
      method: POST
      path: /repos/{owner}/{repo}/issues
    compensate:
      method: PATCH
      url: /repos/{owner}/{repo}/issues/${response.body.number}
      body: {state: closed, title: "${request.body.title}"}
  - name: update-contact
    match: {host: "crm.example.test:8443", method: [PUT, PATCH], path: "/contacts/{id}"}
    snapshot: {url: "/contacts/{id}?full=1"}
    compensate: restore
"""


@pytest.fixture
def rules(load_rules: LoadRules) -> RuleSet:
    return load_rules(CONFIG)


def explain(rules: RuleSet, method: str, url: str, body: object = b"", default: str = "log") -> str:
    req = request(method, url, body=body)
    return format_explanation(req, rules.explain(req), default_mutations=default)


def test_verdicts_stop_at_the_first_match(rules: RuleSet) -> None:
    req = request("POST", "https://api.github.com/repos/acme/web/issues", body={"labels": []})
    verdicts = rules.explain(req)
    assert [(v.rule.name, v.matched) for v in verdicts] == [
        ("block-deletes", False),
        ("urgent-issues", False),
        ("create-issue", True),
    ]
    assert verdicts[0].reasons == ("method POST is not DELETE",)
    assert verdicts[1].reasons == ('body $.labels = [] fails {contains: "urgent"}',)
    assert verdicts[2].captures == {"owner": "acme", "repo": "web"}
    found = rules.match(req)
    assert found is not None and found.rule is verdicts[-1].rule


def test_matching_rule_with_compensation(rules: RuleSet, tmp_path: object) -> None:
    text = explain(
        rules, "POST", "https://api.github.com/repos/acme/web/issues", body={"title": "Flaky"}
    )
    assert text == (
        "Request: POST https://api.github.com/repos/acme/web/issues\n"
        'Body:    {"title": "Flaky"}\n'
        "\n"
        "Rules, in order (first match wins):\n"
        f"  1. block-deletes  ({tmp_path}/config.yaml:2)\n"
        "     no: method POST is not DELETE\n"
        f"  2. urgent-issues  ({tmp_path}/config.yaml:6)\n"
        '     no: body $.labels = (nothing) fails {contains: "urgent"}\n'
        f"  3. create-issue  ({tmp_path}/config.yaml:16)\n"
        "     MATCH\n"
        "\n"
        f"Matched: create-issue  ({tmp_path}/config.yaml:16)\n"
        "  captures:      owner=acme, repo=web\n"
        "  action:        allow: forwarded and journaled\n"
        "  risk:          medium\n"
        "  snapshot:      none\n"
        "  compensation:  PATCH https://api.github.com/repos/acme/web/issues/"
        '${response.body.number} body {"state": "closed", "title": "Flaky"} '
        "(completed from the response)\n"
        "  description:   every issue an agent opens is closed again on rollback\n"
    )


def test_held_rule(rules: RuleSet) -> None:
    text = explain(
        rules, "POST", "https://api.github.com/repos/a/b/issues", body={"labels": ["urgent"]}
    )
    assert "Matched: urgent-issues" in text
    assert "action:        hold: held until a person approves or denies it" in text
    assert "(times out after 120s)" in text
    assert "risk:          high" in text
    assert "compensation:  not given, so inferred from the traffic" in text


def test_denying_rule_shows_its_reason(rules: RuleSet) -> None:
    text = explain(rules, "DELETE", "https://api.github.com/repos/a/b")
    assert "Matched: block-deletes" in text
    assert "action:        deny: never forwarded; the agent gets 403 undoproxy_blocked" in text
    assert "reason:        agents may not delete on GitHub" in text
    assert "snapshot:" not in text


def test_snapshot_and_named_compensator(rules: RuleSet) -> None:
    text = explain(rules, "PATCH", "https://crm.example.test:8443/contacts/42", body={"a": 1})
    assert "  captures:      id=42\n" in text
    assert (
        "  snapshot:      GET https://crm.example.test:8443/contacts/42?full=1 before forwarding"
        " (if it fails: block)\n"
    ) in text
    assert "  compensation:  restore: PUT the snapshot back" in text


def test_reasons_for_every_part_that_failed(rules: RuleSet) -> None:
    text = explain(rules, "GET", "https://crm.example.test/contacts/42")
    assert (
        "  4. update-contact  (" in text
        and "     no: host crm.example.test:443 does not match crm.example.test:8443\n"
        "         method GET is not PATCH, PUT\n"
        in text
    )


@pytest.mark.parametrize(
    ("method", "default", "expected"),
    [
        ("GET", "hold", "By default: GET is a read, so it passes (and is journaled)."),
        (
            "POST",
            "log",
            "By default: POST is a mutation and defaults.mutations is log, "
            "so it is forwarded and journaled.\n"
            "Compensation:  inferred from the traffic (defaults.compensate: auto)",
        ),
        (
            "DELETE",
            "hold",
            "By default: DELETE is a mutation and defaults.mutations is hold, "
            "so it is held until a person approves or denies it.",
        ),
        (
            "PUT",
            "deny",
            "By default: PUT is a mutation and defaults.mutations is deny, "
            "so it is blocked with 403 undoproxy_blocked.\n",
        ),
        ("PATCH", "allow", "defaults.mutations is allow, so it is forwarded."),
    ],
)
def test_no_match_says_what_happens_by_default(
    rules: RuleSet, method: str, default: str, expected: str
) -> None:
    text = explain(rules, method, "https://example.test/x", default=default)
    assert "No rule matches.\n" in text
    assert expected in text


def test_no_rules_at_all() -> None:
    req = request("POST", "https://example.test/")
    text = format_explanation(req, RuleSet().explain(req), default_mutations="log")
    assert "No rules are configured." in text
    assert "defaults.mutations is log" in text


def test_non_json_body_is_summarized(rules: RuleSet) -> None:
    text = explain(rules, "POST", "https://example.test/form", body=b"a=1&b=2")
    assert "Body:    (not JSON, 7 bytes)\n" in text
