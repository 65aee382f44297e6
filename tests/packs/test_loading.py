"""`packs:` in config.yaml, the pack files, `undoproxy packs` and `rules explain`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.proc import run_cli
from undoproxy.config import load_config
from undoproxy.errors import ConfigErrors
from undoproxy.packs import BUILTIN_ORDER, builtin_names
from undoproxy.packs.loading import load_builtin
from undoproxy.rules import RequestView


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigErrors) as info:
        load_config(_config(tmp_path, text))
    return [
        f"{Path(e.where.file).name}:{e.where.line}: {e.message}"
        for e in info.value.errors
        if e.where
    ]


def _pack_order(names: list[str]) -> list[str]:
    return list(dict.fromkeys(n.split("/")[0] for n in names if "/" in n))


@pytest.mark.parametrize("name", builtin_names())
def test_every_built_in_pack_loads(name: str) -> None:
    pack = load_builtin(name)
    assert pack.rules and pack.description
    assert all(r.name.startswith(f"{name}/") for r in pack.rules)


def test_no_packs_key_turns_every_pack_on_after_the_config_rules(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "rules:\n  - name: mine\n    match: {host: a.test}\n"))
    names = [r.name for r in config.rules]
    assert names[0] == "mine"
    assert _pack_order(names) == [n for n in BUILTIN_ORDER if n in builtin_names()]
    assert load_config(None).rules.get("llm/openai-chat") is not None


def test_packs_picks_some_in_the_given_order_and_an_empty_list_none(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "packs: [search, llm]\n"))
    assert _pack_order([r.name for r in config.rules]) == ["search", "llm"]
    assert load_config(_config(tmp_path, "packs: []\n")).rules.rules == []


def test_a_config_rule_overrides_a_pack_rule_by_coming_first(tmp_path: Path) -> None:
    config = load_config(
        _config(
            tmp_path,
            """
            packs: [graphql]
            rules:
              - name: create-issue-by-graphql
                match: {method: POST, path: /graphql, graphql: mutation,
                        body: {"$.operationName": CreateIssue}}
                compensate: {method: POST, url: /graphql, body: {query: "mutation {{ close }}"}}
            """,
        )
    )
    body = (
        b'{"query": "mutation CreateIssue { createIssue { id } }", "operationName": "CreateIssue"}'
    )
    found = config.rules.match(RequestView.from_parts("POST", "https://x.test/graphql", {}, body))
    assert found is not None and found.rule.name == "create-issue-by-graphql"
    other = body.replace(b"CreateIssue", b"DeleteRepo")
    found = config.rules.match(RequestView.from_parts("POST", "https://x.test/graphql", {}, other))
    assert found is not None and found.rule.name == "graphql/mutation"


def test_hosts_puts_a_pack_on_other_hosts_with_its_enterprise_prefix(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "packs:\n  - {name: github, hosts: [ghe.corp.test]}\n"))
    url = "https://ghe.corp.test/api/v3/repos/acme/web/issues"
    found = config.rules.match(RequestView.from_parts("POST", url, {}, b"{}"))
    assert found is not None and found.rule.name == "github/create-issue"
    public = "https://api.github.com/repos/acme/web/issues"
    assert config.rules.match(RequestView.from_parts("POST", public, {}, b"{}")) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "packs:\n  - llm\n  - githb\n",
            "config.yaml:3: unknown pack 'githb' (did you mean 'github'?)",
        ),
        (
            "packs:\n  - {name: llm, hosts: api.example.test}\n",
            "config.yaml:2: hosts must be a non-empty list of host names, got 'api.example.test'",
        ),
        (
            "packs:\n  - {name: llm, host: [a.test]}\n",
            "config.yaml:2: unknown key 'host' in a packs entry (did you mean 'hosts'?)",
        ),
        ("packs:\n  - llm\n  - llm\n", "config.yaml:3: pack 'llm' is already listed at"),
        ("packs: llm\n", "config.yaml:1: packs must be a list of pack names or {name, hosts}"),
        ("proxy: {}\npacks:\n", "config.yaml:2: packs: expected a list of packs ([] for none)"),
        (
            "packs:\n  - name: github\n    correction: {subject: Oops, text: Ignore it}\n",
            "config.yaml:3: correction is only for the email pack",
        ),
        (
            "packs:\n  - name: email\n    correction: {subject: Oops}\n",
            "config.yaml:3: correction needs a text: non-empty text",
        ),
        (
            "packs:\n  - name: email\n    correction: {subject: Oops, text: x, html: y}\n",
            "config.yaml:3: unknown key 'html' in correction",
        ),
        (
            "packs:\n  - name: email\n    correction: Oops\n",
            "config.yaml:3: correction must be a mapping {subject, text}, got 'Oops'",
        ),
    ],
    ids=[
        "unknown-name",
        "hosts-not-a-list",
        "unknown-key",
        "listed-twice",
        "not-a-list",
        "empty",
        "correction-not-email",
        "correction-no-text",
        "correction-unknown-key",
        "correction-not-a-mapping",
    ],
)
def test_bad_packs_entries_are_errors_with_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    if "github" not in builtin_names() and "github" in expected:
        expected = expected.replace("did you mean 'github'?", "")
    [error] = _errors(tmp_path, text)
    assert error.startswith(expected.split(" (did you mean")[0])


def test_a_config_rule_cannot_take_a_pack_rule_s_name(tmp_path: Path) -> None:
    [error] = _errors(
        tmp_path,
        """
        packs: [llm]
        rules:
          - name: llm/openai-chat
            match: {host: api.openai.com}
        """,
    )
    assert error.startswith("llm.yaml:")
    assert "duplicate rule name 'llm/openai-chat' (first at " in error
    assert "config.yaml:4" in error


def test_rules_check_and_explain_name_the_pack_rule(tmp_path: Path) -> None:
    config = _config(tmp_path, "packs: [llm, mcp]\n")
    checked = run_cli("rules", "check", "-c", str(config), cwd=tmp_path)
    assert checked.returncode == 0 and "OK" in checked.stdout
    explained = run_cli(
        "rules",
        "explain",
        "-c",
        str(config),
        "POST",
        "https://api.openai.com/v1/chat/completions",
        "--body",
        '{"model": "gpt-4o", "messages": []}',
        cwd=tmp_path,
    )
    assert explained.returncode == 0, explained.stderr
    assert "Matched: llm/openai-chat" in explained.stdout
    assert "compensation:  none needed (a read)" in explained.stdout
    # The packs' rules for other hosts are folded into one line, not listed one by one.
    other = run_cli(
        "rules",
        "explain",
        "-c",
        str(config),
        "POST",
        "https://crm.example.test/contacts",
        cwd=tmp_path,
    )
    assert "Not shown: pack rules for other hosts or methods: llm (19)" in other.stdout
    assert "llm/anthropic-messages" not in other.stdout
    assert "mcp/tool-call" in other.stdout  # any host: it says why it does not match
    bad = _config(tmp_path, "packs: [nope]\n")
    failed = run_cli("rules", "check", "-c", str(bad), cwd=tmp_path)
    assert failed.returncode == 2 and "config.yaml:1: unknown pack 'nope'" in failed.stderr


def test_an_email_correction_goes_to_every_email_rule_and_only_there(tmp_path: Path) -> None:
    config = load_config(
        _config(
            tmp_path,
            """
            packs:
              - name: email
                correction: {subject: Sorry, text: Please ignore my last email.}
              - slack
            """,
        )
    )
    corrected = {r.name: r.correction for r in config.rules.rules if r.correction is not None}
    assert sorted(corrected) == sorted(
        f"email/{name}"
        for name in ("sendgrid", "mailgun", "mailgun-mime", "postmark", "postmark-batch",
                     "resend", "ses")
    )  # fmt: skip
    c = corrected["email/sendgrid"]
    assert (c.provider, c.subject, c.text) == ("sendgrid", "Sorry", "Please ignore my last email.")
