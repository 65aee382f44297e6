"""docs/rules.md documents every key and operator the parser accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.compensators.catalog import GENERIC
from undoproxy.rules import MATCH_KEYS, OPERATORS, RULE_KEYS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("key", sorted(RULE_KEYS | MATCH_KEYS | OPERATORS))
def test_documented(key: str) -> None:
    assert f"`{key}`" in DOC


@pytest.mark.parametrize("name", sorted(GENERIC))
def test_named_compensators_documented(name: str) -> None:
    assert f"`{name}`" in DOC


@pytest.mark.parametrize(
    "reference",
    [
        "${request.body.<jsonpath>}",
        "${response.body.<jsonpath>}",
        "${response.headers.<Name>}",
        "${snapshot.body}",
        "${snapshot.body.<jsonpath>}",
    ],
)
def test_template_references_documented(reference: str) -> None:
    assert f"`{reference}`" in DOC


def test_rules_examples_in_the_doc_load(tmp_path: Path) -> None:
    from .helpers import parse_config, request

    blocks = [b.split("```", 1)[0] for b in DOC.split("```yaml\n")[1:]]
    full = [b for b in blocks if b.startswith("rules:")]
    assert full
    for block in full:
        (tmp_path / "config.yaml").write_text(block)
        rules = parse_config(tmp_path)
        assert rules.rules
    req = request(
        "POST", "https://api.github.com/repos/acme/web/issues", body={"labels": ["urgent"]}
    )
    found = parse_config(tmp_path).match(req)
    assert found is not None and found.rule.name == "close-issue-instead-of-create"


def test_fragment_examples_in_the_doc_load(tmp_path: Path) -> None:
    from .helpers import parse_config

    blocks = [b.split("```", 1)[0] for b in DOC.split("```yaml\n")[1:]]
    in_match = "rules:\n  - name: x\n    match:\n"
    wrappers = {  # how each kind of fragment sits in a whole config: prefix, indent
        "host:": (in_match, 6),
        "query:": (in_match, 6),
        "headers:": (in_match, 6),
        "body:": (in_match, 6),
        "compensate:": ("rules:\n  - name: x\n    match: {path: '/repos/{owner}/{repo}'}\n", 4),
    }
    checked = 0
    for block in blocks:
        for start, (prefix, indent) in wrappers.items():
            if block.startswith(start):
                lines = block.splitlines(keepends=True)
                (tmp_path / "config.yaml").write_text(
                    prefix + "".join(" " * indent + x for x in lines)
                )
                assert parse_config(tmp_path).rules, block
                checked += 1
    assert checked >= 5
