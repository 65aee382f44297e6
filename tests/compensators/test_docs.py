"""docs/compensators.md documents every named compensator, status and template reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.compensators.catalog import GENERIC, PACKS
from undoproxy.errors import Location
from undoproxy.rules import parse_rules
from undoproxy.yamlsource import load_text

DOC = (Path(__file__).resolve().parents[2] / "docs" / "compensators.md").read_text(encoding="utf-8")
YAML_BLOCKS = [b.split("```", 1)[0] for b in DOC.split("```yaml\n")[1:]]


@pytest.mark.parametrize("name", sorted(GENERIC | PACKS))
def test_every_named_compensator_is_documented(name: str) -> None:
    assert f"`{name}`" in DOC


@pytest.mark.parametrize(
    "status", ["compensated", "unverified", "failed", "conflict", "irreversible", "skipped"]
)
def test_every_rollback_status_is_documented(status: str) -> None:
    assert f"**`{status}`**" in DOC  # each has its "what to do" entry
    assert f"| `{status}` |" in DOC  # and its row in the status table


@pytest.mark.parametrize(
    "reference",
    [
        "{name}",
        "${request.body}",
        "${request.body.<jsonpath>}",
        "${response.body}",
        "${response.body.<jsonpath>}",
        "${response.headers.<Name>}",
        "${snapshot.body}",
        "${snapshot.body.<jsonpath>}",
    ],
)
def test_every_template_reference_is_documented(reference: str) -> None:
    assert f"`{reference}`" in DOC


def test_rule_examples_load() -> None:
    blocks = [b for b in YAML_BLOCKS if b.startswith("rules:")]
    assert len(blocks) >= 6
    used: set[str] = set()
    for block in blocks:
        doc = load_text(block, "compensators.md")
        rules = parse_rules(doc["rules"], None, base_dir=Path("."), where=Location("doc", 0))
        used |= {r.compensate for r in rules.rules if isinstance(r.compensate, str)}
    # Every named compensator has an example rule.
    assert used == set(GENERIC | PACKS)
