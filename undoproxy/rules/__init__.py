"""The rules engine: pure code that parses YAML rules and matches requests against them.

No mitmproxy or aiohttp here: rules take plain data (`RequestView`) and return plain data
(`Match`, `Verdict`, rendered templates). See docs/rules.md for the user-facing reference.

    parse_rules(rules, include, base_dir=..., where=...) -> RuleSet
    RuleSet.match(RequestView.from_parts(method, url, headers, body)) -> Match | None
    render_template(rule.compensate, TemplateContext(...)) -> the compensation request
"""

from __future__ import annotations

from undoproxy.rules.actions import COMPENSATE_KEYS, SNAPSHOT_KEYS
from undoproxy.rules.conditions import OPERATORS
from undoproxy.rules.explain import format_explanation
from undoproxy.rules.match import RuleSet
from undoproxy.rules.model import (
    ACTIONS,
    HTTP_METHODS,
    ON_SNAPSHOT_ERROR,
    READ_METHODS,
    RISKS,
    Match,
    Rule,
    SnapshotSpec,
    Verdict,
)
from undoproxy.rules.parse import MATCH_KEYS, RULE_KEYS, parse_rules
from undoproxy.rules.request import NOT_JSON, RequestView
from undoproxy.rules.templates import (
    TemplateContext,
    TemplateError,
    render_template,
    render_url,
    template_references_response,
    template_references_snapshot,
)

__all__ = [
    "ACTIONS",
    "COMPENSATE_KEYS",
    "HTTP_METHODS",
    "MATCH_KEYS",
    "NOT_JSON",
    "ON_SNAPSHOT_ERROR",
    "OPERATORS",
    "READ_METHODS",
    "RISKS",
    "RULE_KEYS",
    "SNAPSHOT_KEYS",
    "Match",
    "RequestView",
    "Rule",
    "RuleSet",
    "SnapshotSpec",
    "TemplateContext",
    "TemplateError",
    "Verdict",
    "format_explanation",
    "parse_rules",
    "render_template",
    "render_url",
    "template_references_response",
    "template_references_snapshot",
]
