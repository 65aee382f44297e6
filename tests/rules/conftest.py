"""Fixtures for the rules tests: YAML written to real files under tmp_path, then parsed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from undoproxy.errors import ConfigErrors
from undoproxy.rules import RuleSet

from .helpers import parse_config, write

LoadRules = Callable[..., RuleSet]
RuleErrors = Callable[..., list[str]]


@pytest.fixture
def load_rules(tmp_path: Path) -> LoadRules:
    """`load_rules(config_text, {other_file: text}) -> RuleSet`."""

    def load(text: str, files: dict[str, str] | None = None) -> RuleSet:
        write(tmp_path, {"config.yaml": text, **(files or {})})
        return parse_config(tmp_path)

    return load


@pytest.fixture
def rule_errors(tmp_path: Path) -> RuleErrors:
    """`rule_errors(config_text, {other_file: text}) -> ["config.yaml:3: message", ...]`."""

    def errors(text: str, files: dict[str, str] | None = None) -> list[str]:
        write(tmp_path, {"config.yaml": text, **(files or {})})
        with pytest.raises(ConfigErrors) as info:
            parse_config(tmp_path)
        out = []
        for err in info.value.errors:
            assert err.where is not None
            out.append(f"{Path(err.where.file).name}:{err.where.line}: {err.message}")
        return out

    return errors
