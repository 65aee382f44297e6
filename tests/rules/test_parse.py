"""Parsing: defaults, every key, snapshots and compensation as plain data."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.errors import ConfigErrors, Location
from undoproxy.rules import RULE_KEYS, SnapshotSpec, parse_rules

from .conftest import LoadRules
from .helpers import request


def test_defaults(load_rules: LoadRules) -> None:
    rules = load_rules(
        """
        rules:
          - name: plain
        """
    )
    rule = rules.rules[0]
    assert (rule.name, rule.risk, rule.action, rule.methods) == ("plain", "medium", "allow", None)
    assert (rule.snapshot, rule.compensate, rule.timeout) == (None, None, None)
    assert (rule.on_snapshot_error, rule.reason, rule.description) == ("block", None, None)
    assert rule.where.line == 2 and Path(rule.where.file).name == "config.yaml"
    assert not rule.snapshot_needed()


def test_every_key(load_rules: LoadRules) -> None:
    rules = load_rules(
        """
        rules:
          - name: update-contact
            description: contacts are restored from their snapshot
            match:
              host: CRM.example.test
              method: [put, PATCH]
              path: /contacts/{id}
              query: {notify: "false"}
              headers: {X-Tenant: acme}
              body: {"$.email": {regex: "@"}}
            risk: HIGH
            action: hold
            timeout: 90s
            snapshot: {url: "/contacts/{id}?full=1"}
            on_snapshot_error: proceed
            compensate: restore
            reason: contacts need a person
        """
    )
    rule = rules.rules[0]
    assert rule.methods == frozenset({"PUT", "PATCH"})
    assert (rule.risk, rule.action, rule.timeout) == ("high", "hold", 90.0)
    assert rule.snapshot == SnapshotSpec("/contacts/{id}?full=1")
    assert (rule.compensate, rule.on_snapshot_error) == ("restore", "proceed")
    assert rule.reason == "contacts need a person"
    assert rule.description == "contacts are restored from their snapshot"
    assert rule.path_captures == ("id",)
    req = request(
        "PATCH",
        "https://crm.example.test/contacts/7?notify=false",
        body={"email": "a@b.test"},
        headers={"x-tenant": "acme"},
    )
    found = rules.match(req)
    assert found is not None and found.captures == {"id": "7"}


@pytest.mark.parametrize(
    ("snapshot", "compensate", "needed", "url"),
    [
        ("true", None, True, None),
        ("false", None, False, None),
        ('{url: "/c/{id}"}', None, True, "/c/{id}"),
        (None, "restore", True, None),
        (None, "recreate", True, None),
        (None, "delete-created", False, None),
        (None, "none", False, None),
        (None, "{method: PUT, url: '/c/{id}', body: '${snapshot.body}'}", True, None),
        (None, "{method: DELETE, url: '/c/{id}'}", False, None),
    ],
)
def test_snapshot_needed(
    load_rules: LoadRules,
    snapshot: str | None,
    compensate: str | None,
    needed: bool,
    url: str | None,
) -> None:
    lines = ["rules:", "  - name: r", "    match: {method: PUT, path: '/c/{id}'}"]
    if snapshot is not None:
        lines.append(f"    snapshot: {snapshot}")
    if compensate is not None:
        lines.append(f"    compensate: {compensate}")
    rule = load_rules("\n".join(lines) + "\n").rules[0]
    assert rule.snapshot_needed() is needed
    effective = rule.effective_snapshot
    assert (effective is not None) is needed
    if effective is not None:
        assert effective.url_template == url


def test_explicit_compensation_is_plain_data(load_rules: LoadRules) -> None:
    rule = load_rules(
        """
        rules:
          - name: issue
            match: {method: post, path: "/repos/{owner}/{repo}/issues"}
            compensate:
              method: patch
              url: /repos/{owner}/{repo}/issues/${response.body.number}
              headers: {X-Attempt: 1}
              body: {state: closed, closed_on: 2024-05-01}
        """
    ).rules[0]
    assert rule.compensate == {
        "method": "PATCH",
        "url": "/repos/{owner}/{repo}/issues/${response.body.number}",
        "headers": {"X-Attempt": "1"},
        "body": {"state": "closed", "closed_on": "2024-05-01"},
    }
    assert type(rule.compensate) is dict
    assert type(rule.compensate["body"]) is dict


def test_rule_keys_accepted() -> None:
    assert {"name", "match", "compensate", "snapshot", "timeout"} <= RULE_KEYS


def test_no_rules_at_all(tmp_path: Path) -> None:
    rules = parse_rules(None, None, base_dir=tmp_path, where=Location("config.yaml", 0))
    assert rules.rules == []


def test_plain_python_data_is_accepted(tmp_path: Path) -> None:
    where = Location("cfg.yaml", 0)
    rules = parse_rules(
        [{"name": "a", "match": {"host": "x.test", "method": "post"}}],
        None,
        base_dir=tmp_path,
        where=where,
    )
    found = rules.match(request("POST", "https://x.test/"))
    assert found is not None and found.rule.where == where
    with pytest.raises(ConfigErrors) as info:
        parse_rules([{"name": "a", "risk": "huge"}], None, base_dir=tmp_path, where=where)
    assert str(info.value) == (
        "cfg.yaml: invalid risk 'huge' (expected one of: critical, high, low, medium)"
    )


def test_rule_set_helpers(load_rules: LoadRules) -> None:
    rules = load_rules("rules:\n  - name: a\n  - name: b\n")
    assert len(rules) == 2
    assert [r.name for r in rules] == ["a", "b"]
    b = rules.get("b")
    assert b is not None and b.name == "b"
    assert rules.get("c") is None
    assert {rules.rules[0]: 1, b: 2}[b] == 2  # rules are hashable (by identity)
