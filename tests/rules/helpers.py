"""Helpers shared by the rules tests."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

from undoproxy.errors import Location
from undoproxy.rules import RequestView, RuleSet, parse_rules
from undoproxy.yamlsource import load_file, load_text


def write(tmp_path: Path, files: dict[str, str]) -> None:
    """Write each file (dedented) under tmp_path."""
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def parse_config(tmp_path: Path) -> RuleSet:
    """Parse tmp_path/config.yaml the way config.py does."""
    config = tmp_path / "config.yaml"
    doc = load_file(config) or {}
    return parse_rules(
        doc.get("rules"), doc.get("include"), base_dir=tmp_path, where=Location(str(config), 0)
    )


def request(
    method: str,
    url: str,
    body: Any = b"",
    headers: dict[str, str] | None = None,
) -> RequestView:
    """A RequestView; a body that is not bytes is sent as JSON."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return RequestView.from_parts(method, url, headers or {}, raw)


def rule_set(*rules: dict[str, Any]) -> RuleSet:
    """A RuleSet from rule dicts (round-tripped through YAML); unnamed rules get r0, r1, ..."""
    named = [{"name": f"r{i}", **rule} for i, rule in enumerate(rules)]
    doc = load_text(yaml.safe_dump({"rules": named}, sort_keys=False), "test.yaml")
    return parse_rules(doc["rules"], None, base_dir=Path("."), where=Location("test.yaml", 0))


def matcher(match: dict[str, Any]) -> RuleSet:
    """A RuleSet of one rule with this `match:` block."""
    return rule_set({"match": match})
