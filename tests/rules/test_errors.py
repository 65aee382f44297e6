"""Every validation error, with the file:line a user is pointed to."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.errors import ConfigErrors

from .conftest import RuleErrors
from .helpers import parse_config

ERRORS = [
    (
        "unknown rule key with a suggestion",
        """
        rules:
          - name: a
            actoin: deny
        """,
        ["config.yaml:3: unknown key 'actoin' in a rule (did you mean 'action'?)"],
    ),
    (
        "match key at rule level",
        """
        rules:
          - name: a
            host: api.github.com
        """,
        ["config.yaml:3: unknown key 'host' in a rule (did you mean to put it under match:?)"],
    ),
    (
        "unknown match key",
        """
        rules:
          - name: a
            match:
              host: api.github.com
              methods: [POST]
        """,
        ["config.yaml:5: unknown key 'methods' in match (did you mean 'method'?)"],
    ),
    (
        "missing name",
        """
        rules:
          - name: a
          - match: {method: POST}
            risk: low
        """,
        ["config.yaml:3: rule has no name: (every rule needs a unique name)"],
    ),
    (
        "empty name",
        """
        rules:
          - name: ""
        """,
        ["config.yaml:2: rule name must be a non-empty string, got ''"],
    ),
    (
        "duplicate name",
        """
        rules:
          - name: a
          - name: b
          - name: a
        """,
        ["config.yaml:4: duplicate rule name 'a' (first at {dir}/config.yaml:2)"],
    ),
    (
        "bad risk",
        """
        rules:
          - name: a
            risk: extreme
        """,
        ["config.yaml:3: invalid risk 'extreme' (expected one of: critical, high, low, medium)"],
    ),
    (
        "bad action",
        """
        rules:
          - name: a
            action: alow
        """,
        ["config.yaml:3: invalid action 'alow' (did you mean 'allow'?)"],
    ),
    (
        "bad method in a list",
        """
        rules:
          - name: a
            match:
              method:
                - POST
                - PUTT
        """,
        ["config.yaml:6: unknown method 'PUTT' (did you mean 'PUT'?)"],
    ),
    (
        "empty method list",
        """
        rules:
          - name: a
            match: {method: []}
        """,
        ["config.yaml:3: method must not be an empty list (leave it out to match any method)"],
    ),
    (
        "bad host",
        """
        rules:
          - name: a
            match:
              host: https://api.github.com/
        """,
        [
            "config.yaml:4: host is a host name like api.example.com, not a URL: "
            "'https://api.github.com/'"
        ],
    ),
    (
        "bad port",
        """
        rules:
          - name: a
            match: {host: "api.test:99999"}
        """,
        ["config.yaml:3: invalid port in host 'api.test:99999'"],
    ),
    (
        "unknown operator",
        """
        rules:
          - name: a
            match:
              body:
                "$.amount":
                  greater: 5
        """,
        ["config.yaml:6: unknown operator 'greater' (did you mean 'gte'?)"],
    ),
    (
        "bad operand",
        """
        rules:
          - name: a
            match:
              query:
                page: {gt: many}
        """,
        ["config.yaml:5: gt takes a number, got 'many'"],
    ),
    (
        "jsonpath without $",
        """
        rules:
          - name: a
            match:
              body:
                amount: {gt: 5}
        """,
        ["config.yaml:5: a JSONPath must start with $: 'amount'"],
    ),
    (
        "invalid jsonpath",
        """
        rules:
          - name: a
            match:
              body:
                "$.items[?(@.x >": {exists: true}
        """,
        ["config.yaml:5: invalid JSONPath '$.items[?(@.x >': Parse error near the end of string!"],
    ),
    (
        "invalid regex",
        """
        rules:
          - name: a
            match:
              headers:
                User-Agent:
                  regex: "(curl"
        """,
        ["config.yaml:6: invalid regex '(curl': missing ), unterminated subpattern at position 0"],
    ),
    (
        "path template that does not parse",
        """
        rules:
          - name: a
            match:
              path: /repos/{owner/issues
        """,
        ["config.yaml:4: unbalanced '{' in path '/repos/{owner/issues'"],
    ),
    (
        "path not starting with /",
        """
        rules:
          - name: a
            match: {path: "repos/{id}"}
        """,
        ["config.yaml:3: path must start with /: 'repos/{id}'"],
    ),
    (
        "path with a repeated capture",
        """
        rules:
          - name: a
            match: {path: "/a/{id}/b/{id}"}
        """,
        ["config.yaml:3: capture {id} appears twice in path '/a/{id}/b/{id}'"],
    ),
    (
        "path with ** inside a segment",
        """
        rules:
          - name: a
            match: {path: "/a/b**"}
        """,
        ["config.yaml:3: ** must be a whole segment, as in /files/**: '/a/b**'"],
    ),
    (
        "compensation capture the path lacks",
        """
        rules:
          - name: a
            match:
              method: POST
              path: /repos/{owner}/{repo}/issues
            compensate:
              method: PATCH
              url: /repos/{owner}/{repo}/issues/{number}
        """,
        [
            "config.yaml:8: compensate url uses {number} but match.path has no {number} "
            "(it captures {owner}, {repo})"
        ],
    ),
    (
        "capture in a compensation body, no path at all",
        """
        rules:
          - name: a
            match: {method: POST}
            compensate:
              method: DELETE
              url: /things
              body:
                ids:
                  - "{id}"
        """,
        [
            "config.yaml:9: compensate body uses {id} but match.path has no {id} "
            "(it captures nothing)"
        ],
    ),
    (
        "unknown template root",
        """
        rules:
          - name: a
            match: {method: POST}
            compensate:
              method: DELETE
              url: /things/${response.json.id}
        """,
        [
            "config.yaml:6: compensate url: unknown reference ${response.json.id}: use "
            "request.body[.<jsonpath>], response.body[.<jsonpath>], response.headers.<Name> "
            "or snapshot.body[.<jsonpath>]"
        ],
    ),
    (
        "unbalanced brace in a compensation header",
        """
        rules:
          - name: a
            match: {method: POST}
            compensate:
              method: DELETE
              url: /things
              headers:
                X-Note: "oops }"
        """,
        [
            "config.yaml:8: compensate headers: unbalanced '}' in 'oops }' "
            "(write }} for a literal brace)"
        ],
    ),
    (
        "unknown named compensator",
        """
        rules:
          - name: a
            match: {method: POST}
            compensate: delete_created
        """,
        ["config.yaml:4: unknown compensator 'delete_created' (did you mean 'delete-created'?)"],
    ),
    (
        "compensation without method and url",
        """
        rules:
          - name: a
            match: {method: POST}
            compensate:
              body: {state: closed}
        """,
        [
            "config.yaml:4: compensate needs a method (e.g. method: DELETE)",
            "config.yaml:4: compensate needs a url (absolute, or a path on the same host)",
        ],
    ),
    (
        "compensation with a bad method and an unknown key",
        """
        rules:
          - name: a
            match: {method: POST}
            compensate:
              method: UNDO
              url: /x
              query: {a: 1}
        """,
        [
            "config.yaml:7: unknown key 'query' in compensate "
            "(expected one of: body, headers, method, url)",
            "config.yaml:5: unknown compensate method 'UNDO' (did you mean 'UNLOCK'?)",
        ],
    ),
    (
        "snapshot on a read-only rule",
        """
        rules:
          - name: a
            match: {method: [GET, HEAD]}
            snapshot: true
        """,
        ["config.yaml:4: snapshot needs a mutation, but this rule only matches reads (GET, HEAD)"],
    ),
    (
        "snapshot-needing compensator on a read-only rule",
        """
        rules:
          - name: a
            match: {method: GET}
            compensate: restore
        """,
        [
            "config.yaml:4: compensate: restore needs a mutation, "
            "but this rule only matches reads (GET)"
        ],
    ),
    (
        "snapshot url using the response",
        """
        rules:
          - name: a
            match: {method: POST}
            snapshot:
              url: /things/${response.body.id}
        """,
        [
            "config.yaml:5: snapshot url cannot use ${response.body.id}: "
            "only request.body is known then"
        ],
    ),
    (
        "snapshot of the wrong shape",
        """
        rules:
          - name: a
            snapshot: yes please
        """,
        ["config.yaml:3: snapshot must be true, false or {url: /path/{capture}}"],
    ),
    (
        "bad timeout",
        """
        rules:
          - name: a
            action: hold
            timeout: soon
        """,
        ["config.yaml:4: expected a duration like 300s, 5m, 1h or 30d, got 'soon'"],
    ),
    (
        "zero timeout",
        """
        rules:
          - name: a
            action: hold
            timeout: 0s
        """,
        ["config.yaml:4: timeout must be more than zero, got '0s'"],
    ),
    (
        "timeout without hold",
        """
        rules:
          - name: a
            timeout: 60s
        """,
        ["config.yaml:3: timeout only applies to rules with action: hold"],
    ),
    (
        "bad on_snapshot_error",
        """
        rules:
          - name: a
            on_snapshot_error: ignore
        """,
        ["config.yaml:3: invalid on_snapshot_error 'ignore' (expected one of: block, proceed)"],
    ),
    (
        "reason that is not text",
        """
        rules:
          - name: a
            reason: [no]
        """,
        ["config.yaml:3: reason must be text, got [False]"],
    ),
    (
        "rule that is not a mapping",
        """
        rules:
          - name: a
          - just a string
        """,
        ["config.yaml:3: a rule must be a mapping with name: and match:, got 'just a string'"],
    ),
    (
        "rules that are not a list",
        """
        rules:
          name: a
        """,
        ["config.yaml:2: rules must be a list of rules"],
    ),
    (
        "header named twice",
        """
        rules:
          - name: a
            match:
              headers:
                X-A: "1"
                x-a: "2"
        """,
        ["config.yaml:6: headers names 'x-a' twice (header names ignore case)"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in ERRORS], ids=[case[0] for case in ERRORS]
)
def test_validation_error(
    rule_errors: RuleErrors, tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert rule_errors(text) == [e.replace("{dir}", str(tmp_path)) for e in expected]


def test_all_errors_are_collected(rule_errors: RuleErrors) -> None:
    errors = rule_errors(
        """
        rules:
          - name: a
            risk: huge
          - name: b
            match: {method: FETCH}
          - name: ok
          - name: c
            action: maybe
        """
    )
    assert [e.split(": ")[0] for e in errors] == ["config.yaml:3", "config.yaml:5", "config.yaml:8"]


def test_error_message_names_file_and_line(rule_errors: RuleErrors, tmp_path: Path) -> None:
    with pytest.raises(ConfigErrors) as info:
        (tmp_path / "config.yaml").write_text("rules:\n  - name: a\n    risk: extreme\n")
        parse_config(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}/config.yaml:3: invalid risk 'extreme'")
