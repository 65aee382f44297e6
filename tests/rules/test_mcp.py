"""`mcp_tool` and `mcp_annotations`: rules by MCP tool name and by the hints a server gave it
(pure: RequestViews, no proxy); and rules/mcp.py's reading of JSON-RPC bodies and answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from undoproxy.errors import ConfigErrors
from undoproxy.rules.mcp import annotations_of, calls_of, capped, responses_of, tool_names

from .helpers import matcher, request, rule_set

URL = "https://tools.example.test/mcp"


def call(name: str, arguments: dict[str, Any] | None = None, ident: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments or {}},
    }


@pytest.mark.parametrize(
    ("pattern", "tool", "matches"),
    [
        ("read_file", "read_file", True),
        ("read_file", "read_files", False),
        ("github.*", "github.create_issue", True),
        ("github.*", "githubx", False),
        ("*", "anything", True),
        (["a", "b*"], "bee", True),
        (["a", "b*"], "c", False),
    ],
)
def test_mcp_tool_globs(pattern: Any, tool: str, matches: bool) -> None:
    rules = matcher({"mcp_tool": pattern})
    assert (rules.match(request("POST", URL, call(tool))) is not None) is matches


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "x"}},
        {"id": 1, "method": "tools/call", "params": {"name": "x"}},
        {"query": "{ x }"},
        b"not json",
        b"",
    ],
)
def test_mcp_tool_needs_a_tools_call(body: Any) -> None:
    assert matcher({"mcp_tool": "*"}).match(request("POST", URL, body)) is None


def test_a_batch_is_held_when_any_call_matches_and_allowed_only_when_all_do() -> None:
    batch = [call("safe", ident=1), call("delete_file", ident=2)]
    held = rule_set({"match": {"mcp_tool": "delete_*"}, "action": "hold"})
    allowed = rule_set({"match": {"mcp_tool": "safe"}, "action": "allow"})
    assert held.match(request("POST", URL, batch)) is not None
    assert allowed.match(request("POST", URL, batch)) is None
    assert allowed.match(request("POST", URL, [call("safe")])) is not None


def test_arguments_are_judged_with_body_conditions() -> None:
    rules = rule_set(
        {
            "match": {
                "mcp_tool": "delete_file",
                "body": {"$.params.arguments.path": {"regex": "^/etc/"}},
            },
            "action": "deny",
        }
    )
    assert rules.match(request("POST", URL, call("delete_file", {"path": "/etc/x"})))
    assert not rules.match(request("POST", URL, call("delete_file", {"path": "/tmp/x"})))


def test_an_ambiguous_body_matches_a_deny_by_tool_and_never_an_allow() -> None:
    dup = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "name": "b"}}'
    )
    deny = rule_set({"match": {"mcp_tool": "b"}, "action": "deny"})
    allow = rule_set({"match": {"mcp_tool": "b"}, "action": "allow"})
    assert deny.match(request("POST", URL, dup)) is not None
    assert allow.match(request("POST", URL, dup)) is None


@pytest.mark.parametrize(
    ("hints", "condition", "matches"),
    [
        ({"readOnlyHint": True}, {"readOnlyHint": True}, True),
        ({"readOnlyHint": False}, {"readOnlyHint": True}, False),
        ({}, {"readOnlyHint": True}, False),  # not given: absent, not MCP's default
        (None, {"readOnlyHint": True}, False),  # the tool was never listed
        ({"destructiveHint": True}, {"destructiveHint": True, "readOnlyHint": {"ne": True}}, False),
        ({}, {"destructiveHint": {"exists": False}}, True),
    ],
)
def test_mcp_annotations_match_what_the_server_said(
    hints: dict[str, Any] | None, condition: dict[str, Any], matches: bool
) -> None:
    rules = matcher({"mcp_annotations": condition})
    req = request("POST", URL, call("t"))
    req.mcp_annotations = hints
    assert (rules.match(req) is not None) is matches


def test_explain_says_why_an_mcp_rule_did_not_match() -> None:
    rules = rule_set({"match": {"mcp_tool": "github.*", "mcp_annotations": {"readOnlyHint": True}}})
    [verdict] = rules.explain(request("POST", URL, call("fs.read")))
    assert verdict.reasons == ("the MCP tool fs.read is not github.*",)
    req = request("POST", URL, call("github.get"))
    [verdict] = rules.explain(req)
    assert verdict.reasons == (
        "MCP annotation readOnlyHint = unknown (no tools/list seen) fails {eq: true}",
    )


@pytest.mark.parametrize(
    ("match", "message"),
    [
        ({"mcp_tool": []}, "mcp_tool must not be an empty list"),
        ({"mcp_tool": 3}, "mcp_tool must be a string or a list of strings"),
        ({"mcp_annotations": {"readonlyhint": True}}, "unknown MCP annotation 'readonlyhint'"),
        ({"mcp_annotations": ["readOnlyHint"]}, "mcp_annotations must be a mapping"),
        ({"mcp_tools": "x"}, "unknown key 'mcp_tools' in match (did you mean 'mcp_tool'?)"),
    ],
)
def test_bad_mcp_keys_are_reported(match: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigErrors) as caught:
        matcher(match)
    assert message in str(caught.value)


def test_reading_json_rpc_bodies_and_answers() -> None:
    assert [c.method for c in calls_of({"jsonrpc": "2.0", "method": "notifications/x"})] == [
        "notifications/x"
    ]
    assert calls_of([call("a"), {"not": "rpc"}]) == []
    assert tool_names([call("a", ident=1), call("b", ident=2)]) == ["a", "b"]
    answers = responses_of(
        [{"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}, {"jsonrpc": "2.0", "method": "log"}]
    )
    assert list(answers) == [1]
    listed = {
        "tools": [
            {"name": "r", "annotations": {"readOnlyHint": True, "title": "R"}},
            {"name": "w"},
        ]
    }
    assert annotations_of(listed) == {"r": {"readOnlyHint": True}, "w": {}}
    big = {"text": "x" * 10_000}
    kept = capped(big, 100)
    assert kept["truncated"] is True and kept["length"] > 10_000 and len(kept["json"]) == 100
    assert capped({"a": 1}) == {"a": 1}


def test_the_mcp_examples_of_docs_rules_load(tmp_path: Path) -> None:
    from .helpers import parse_config

    doc = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```yaml\n")[1:]]
    examples = [b for b in blocks if "mcp_" in b and b.startswith("- name:")]
    assert len(examples) == 2
    for block in examples:
        indented = "".join("  " + line for line in block.splitlines(keepends=True))
        (tmp_path / "config.yaml").write_text("rules:\n" + indented)
        assert parse_config(tmp_path).rules
