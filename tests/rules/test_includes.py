"""Include files: order, shapes, and the errors they can carry."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.errors import ConfigError, ConfigErrors

from .conftest import LoadRules, RuleErrors
from .helpers import request


def test_include_order_and_shapes(load_rules: LoadRules) -> None:
    rules = load_rules(
        """
        include:
          - packs/github.yaml
          - packs/stripe.yaml
          - empty.yaml
        rules:
          - name: local-first
            match: {host: api.github.com, method: DELETE}
            action: deny
        """,
        {
            "packs/github.yaml": """
        - name: github-issues
          match: {host: api.github.com, path: "/repos/{owner}/{repo}/issues"}
          compensate: github.close-issue
        - name: github-any
          match: {host: api.github.com}
        """,
            "packs/stripe.yaml": """
        rules:
          - name: stripe-charges
            match: {host: api.stripe.com, method: POST, path: /v1/charges}
            action: hold
        """,
            "empty.yaml": "",
        },
    )
    assert [r.name for r in rules.rules] == [
        "local-first",
        "github-issues",
        "github-any",
        "stripe-charges",
    ]
    assert Path(rules.rules[1].where.file).name == "github.yaml"
    assert rules.rules[1].where.line == 1
    assert rules.rules[3].where.line == 2
    found = rules.match(request("DELETE", "https://api.github.com/repos/a/b/issues"))
    assert found is not None and found.rule.name == "local-first"


INCLUDE_ERRORS = [
    (
        "missing include file",
        """
        rules: []
        include:
          - packs/ok.yaml
          - packs/missing.yaml
        """,
        {"packs/ok.yaml": "[]"},
        [
            "config.yaml:4: include file not found: packs/missing.yaml "
            "(looked for {dir}/packs/missing.yaml)"
        ],
    ),
    (
        "invalid YAML in an include file",
        """
        include: [bad.yaml]
        """,
        {"bad.yaml": "- name: a\n  match: {host: [x\n"},
        ["bad.yaml:3: invalid YAML: expected ',' or ']', but got '<stream end>'"],
    ),
    (
        "errors inside an include file carry its lines",
        """
        include: [pack.yaml]
        """,
        {
            "pack.yaml": (
                "- name: a\n  risk: none\n- name: b\n  match: {method: GET}\n  snapshot: true\n"
            )
        },
        [
            "pack.yaml:2: invalid risk 'none' (expected one of: critical, high, low, medium)",
            "pack.yaml:5: snapshot needs a mutation, but this rule only matches reads (GET)",
        ],
    ),
    (
        "duplicate name across config and include",
        """
        rules:
          - name: shared
        include:
          - pack.yaml
        """,
        {"pack.yaml": "- name: other\n- name: shared\n"},
        ["pack.yaml:2: duplicate rule name 'shared' (first at {dir}/config.yaml:2)"],
    ),
    (
        "duplicate name across two includes",
        """
        include: [one.yaml, two.yaml]
        """,
        {"one.yaml": "- name: x\n", "two.yaml": "rules:\n  - name: y\n  - name: x\n"},
        ["two.yaml:3: duplicate rule name 'x' (first at {dir}/one.yaml:1)"],
    ),
    (
        "include listed twice",
        """
        include:
          - pack.yaml
          - ./pack.yaml
        """,
        {"pack.yaml": "- name: x\n"},
        ["config.yaml:3: ./pack.yaml is already included at {dir}/config.yaml:2"],
    ),
    (
        "include file of the wrong shape",
        """
        include: [pack.yaml]
        """,
        {"pack.yaml": "just text\n"},
        ["pack.yaml:0: an include file must be a list of rules or a mapping with a rules: list"],
    ),
    (
        "unknown key in an include file",
        """
        include: [pack.yaml]
        """,
        {"pack.yaml": "rules: []\nrulez: []\n"},
        ["pack.yaml:2: unknown key 'rulez' in an include file (did you mean 'rules'?)"],
    ),
    (
        "include entry that is not a path",
        """
        include:
          - {file: x.yaml}
        """,
        {},
        ["config.yaml:2: an include entry must be a file path, got {'file': 'x.yaml'}"],
    ),
    (
        "include that is a directory",
        """
        include: [packs]
        """,
        {"packs/x.yaml": "[]"},
        ["config.yaml:1: include is not a file: packs ({dir}/packs)"],
    ),
]


@pytest.mark.parametrize(
    ("text", "files", "expected"),
    [case[1:] for case in INCLUDE_ERRORS],
    ids=[case[0] for case in INCLUDE_ERRORS],
)
def test_include_error(
    rule_errors: RuleErrors,
    tmp_path: Path,
    text: str,
    files: dict[str, str],
    expected: list[str],
) -> None:
    assert rule_errors(text, files) == [e.replace("{dir}", str(tmp_path)) for e in expected]


def test_unreadable_include(rule_errors: RuleErrors, tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\xfa not utf-8")
    errors = rule_errors("include: [bin.yaml]\n")
    assert len(errors) == 1 and errors[0].startswith("bin.yaml:0: cannot read:")


def test_config_error_is_a_config_error() -> None:
    assert issubclass(ConfigErrors, ConfigError)
