"""What `undoproxy packs [NAME]` prints: the built-in packs, or one pack's rules."""

from __future__ import annotations

from typing import Any

from undoproxy.packs import builtin_names
from undoproxy.packs.loading import Pack, load_builtin
from undoproxy.rules.model import READ_METHODS, Rule


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


def list_packs() -> str:
    """One line per built-in pack: name, rule count, hosts, description."""
    rows = []
    for name in builtin_names():
        pack = load_builtin(name)
        rows.append([pack.name, str(len(pack.rules)), _hosts(pack), pack.description or "-"])
    out = _table(rows, ["PACK", "RULES", "HOSTS", "DESCRIPTION"])
    return (
        out + "\n\nAll are on unless config.yaml says `packs:`; `undoproxy packs NAME` lists one."
    )


def _hosts(pack: Pack) -> str:
    own = list(dict.fromkeys(h.text for r in pack.rules for h in r.match_spec.hosts))
    if not own:
        return "any host"
    return ", ".join(own[:2]) + (f" +{len(own) - 2} more" if len(own) > 2 else "")


def describe_pack(name: str, hosts: tuple[str, ...] | None = None) -> str:
    """The rules of one pack: match, kind, risk, action and compensation of each."""
    pack = load_builtin(name, hosts)
    lines = [f"{pack.name}: {pack.description}", f"file: {pack.where.file}", ""]
    rows = [[r.name, _match(r), _kind(r), r.risk, _action(r), _compensation(r)] for r in pack.rules]
    lines.append(_table(rows, ["RULE", "MATCH", "KIND", "RISK", "ACTION", "COMPENSATION"]))
    return "\n".join(lines)


def _action(rule: Rule) -> str:
    """The rule's action; `defaults` where defaults.mutations decides (no action of its own)."""
    return "defaults" if rule.defers_action and rule.kind != "read" else rule.action


def _match(rule: Rule) -> str:
    spec = rule.match_spec
    parts = []
    if spec.hosts:
        parts.append(",".join(h.text for h in spec.hosts))
    methods = ",".join(sorted(rule.methods)) if rule.methods else "any method"
    parts.append(f"{methods} {spec.path.text if spec.path else '/**'}")
    parts.extend(f"?{q.describe()}" for q in spec.query)
    parts.extend(f"{h.describe()}" for h in spec.headers)
    parts.extend(f"{b.path.text} {b.condition.describe()}" for b in spec.body)
    if spec.graphql is not None:
        parts.append(f"graphql: {'|'.join(sorted(spec.graphql))}")
    if spec.mcp_tools is not None:
        parts.append(f"mcp_tool: {'|'.join(spec.mcp_tools)}")
    parts.extend(f"mcp_annotations.{a.describe()}" for a in spec.mcp_annotations)
    return " ".join(parts)


def _kind(rule: Rule) -> str:
    if rule.kind is not None:
        return rule.kind
    if rule.methods is not None and rule.methods <= READ_METHODS:
        return "read"
    if rule.methods is not None and not rule.methods & READ_METHODS:
        return "mutation"
    return "by method"


def _compensation(rule: Rule) -> str:
    comp = rule.compensate
    if rule.kind == "read":
        return "- (a read)"
    if comp is None:
        return "defaults.compensate"
    if comp == "none":
        return "none: irreversible"
    if isinstance(comp, str):
        return comp
    if "read" in comp:  # read before, undo from it (compensators/rpc.py)
        parts = [f"read {_request(comp['read'])}"]
        parts += [f"{k} {_request(comp[k])}" for k in ("undo", "undo_absent") if k in comp]
        return "; ".join(parts)
    return _request(comp)


def _request(spec: dict[str, Any]) -> str:
    return f"{spec.get('method') or 'GET'} {spec.get('url')}"
