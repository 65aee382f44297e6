"""docs/packs.md: a section per built-in pack naming each of its rules, and examples that load."""

from __future__ import annotations

from pathlib import Path

import pytest

from undoproxy.config import load_config
from undoproxy.packs import builtin_names
from undoproxy.packs.loading import load_builtin

DOC = (Path(__file__).resolve().parents[2] / "docs" / "packs.md").read_text(encoding="utf-8")


def _section(name: str) -> str:
    start = DOC.index(f"## `{name}`")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else None]


@pytest.mark.parametrize("name", builtin_names())
def test_every_pack_has_a_section(name: str) -> None:
    assert load_builtin(name).description.split(" ")[0] and _section(name)


@pytest.mark.parametrize("name", ["llm", "email", "graphql", "mcp", "search"])
def test_the_protocol_packs_sections_name_each_rule(name: str) -> None:
    section = _section(name)
    for rule in load_builtin(name).rules:
        short = rule.name.split("/", 1)[1]
        # Families may be written `llm/openai-chat`, `-completions`: the suffix is enough.
        assert rule.name in section or f"-{short.rsplit('-', 1)[-1]}`" in section, rule.name


def test_config_examples_load(tmp_path: Path) -> None:
    blocks = [b.split("```", 1)[0] for b in DOC.split("```yaml\n")[1:]]
    configs = [b for b in blocks if b.startswith(("packs:", "rules:"))]
    assert len(configs) >= 4
    for block in configs:
        path = tmp_path / "config.yaml"
        path.write_text(block)
        load_config(path)
