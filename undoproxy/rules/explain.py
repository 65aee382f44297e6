"""The text `undoproxy rules explain METHOD URL` prints: which rule matches a request and why."""

from __future__ import annotations

import json
from typing import Any

from undoproxy.compensators.catalog import GENERIC, PACKS
from undoproxy.rules.matcher import graphql_operation
from undoproxy.rules.model import READ_METHODS, RISKS, Rule, Verdict
from undoproxy.rules.request import NOT_JSON, RequestView
from undoproxy.rules.templates import TemplateContext, render_known, template_references_response

_ACTIONS = {
    "allow": "forwarded and journaled",
    "hold": "held until a person approves or denies it in the admin page",
    "deny": "never forwarded; the agent gets 403 undoproxy_blocked",
    "log": "forwarded and journaled",
    "hold-irreversible": "held when no compensation is known, else forwarded and journaled",
}
_DEFAULT_MUTATIONS = {
    "allow": "it is forwarded",
    "log": "it is forwarded and journaled",
    "hold": "it is held until a person approves or denies it",
    "hold-irreversible": "it is held only when no compensation is known for it",
    "deny": "it is blocked with 403 undoproxy_blocked",
}
_DEFAULT_COMPENSATE = {
    "auto": "inferred from the traffic (defaults.compensate: auto)",
    "none": "none: the step is irreversible (defaults.compensate: none)",
}


def format_explanation(
    req: RequestView,
    verdicts: list[Verdict],
    *,
    default_mutations: str,
    default_compensate: str = "auto",
    hold_at: str = "never",
    irreversible: str | None = None,
) -> str:
    """Explain `RuleSet.explain(req)` to a person: each rule tried, then what happens.

    `irreversible` is why no compensation is known for the request (None when one is), which
    decides `defaults.mutations: hold-irreversible`; `hold_at` is `approvals.hold_at`.
    """
    lines = [f"Request: {req.method} {req.url}"]
    if req.body:
        lines.append(f"Body:    {_body_summary(req)}")
    lines.append("")
    if verdicts:
        lines.append("Rules, in order (first match wins):")
        folded: dict[str, int] = {}
        for n, verdict in enumerate(verdicts, 1):
            pack = _pack_of(verdict.rule)
            if pack and not verdict.matched and verdict.reasons[0].startswith(("host ", "method ")):
                # A pack's rules for other hosts or methods say nothing about this request.
                folded[pack] = folded.get(pack, 0) + 1
                continue
            lines.append(f"  {n}. {verdict.rule.name}  ({verdict.rule.where})")
            if verdict.matched:
                lines.append("     MATCH")
            else:
                first, *rest = verdict.reasons or ("did not match",)
                lines.append(f"     no: {first}")
                lines.extend(f"         {reason}" for reason in rest)
        if folded:
            packs = ", ".join(f"{name} ({n})" for name, n in folded.items())
            lines.append(f"  Not shown: pack rules for other hosts or methods: {packs}")
        lines.append("")
    else:
        lines.append("No rules are configured.")
    last = verdicts[-1] if verdicts else None
    if last is not None and last.matched:
        lines.extend(_matched(req, last, default_compensate, default_mutations))
        rule = last.rule
        effective = _effective_action(req, rule, default_mutations)
        if effective in ("allow", "log") and hold_at != "never" and _at_least(rule.risk, hold_at):
            lines.append(
                f"  but:           approvals.hold_at is {hold_at} and the risk is {rule.risk}, "
                "so it is held until a person approves or denies it"
            )
    else:
        if verdicts:
            lines.append("No rule matches.")
        lines.extend(_default(req, default_mutations, default_compensate))
        if default_mutations == "hold-irreversible" and req.method not in READ_METHODS:
            lines.append(
                f"  so:            held: no compensation is known ({irreversible})"
                if irreversible
                else "  so:            forwarded: a compensation is known, it stays undoable"
            )
    return "\n".join(lines) + "\n"


def _is_read(req: RequestView, rule: Rule) -> bool:
    if rule.kind is not None:
        return rule.kind == "read"
    return req.method in READ_METHODS


def _pack_of(rule: Rule) -> str | None:
    """The built-in pack a rule comes from (its file is undoproxy/packs/NAME.yaml), or None."""
    pack, slash, _ = rule.name.partition("/")
    path = rule.where.file.replace("\\", "/")
    return pack if slash and path.endswith(f"/packs/{pack}.yaml") else None


def _at_least(risk: str, threshold: str) -> bool:
    return RISKS.index(risk) >= RISKS.index(threshold)


def _effective_action(req: RequestView, rule: Rule, default_mutations: str) -> str:
    """What happens to a matching request: the rule's action, or (a pack rule that names none,
    on a mutation) defaults.mutations'."""
    if rule.defers_action and not _is_read(req, rule):
        return default_mutations
    return rule.action


def _matched(
    req: RequestView, verdict: Verdict, default_compensate: str, default_mutations: str
) -> list[str]:
    rule = verdict.rule
    captures = ", ".join(f"{k}={v}" for k, v in verdict.captures.items()) or "(none)"
    ctx = TemplateContext(
        captures=verdict.captures, request_body=_request_body(req), graphql=graphql_operation(req)
    )
    effective = _effective_action(req, rule, default_mutations)
    action = f"{effective}: {_ACTIONS.get(effective, effective)}"
    if effective != rule.action:
        action += " (defaults.mutations: the pack rule names no action of its own)"
    if rule.action == "hold" and rule.timeout is not None:
        action += f" (times out after {rule.timeout:g}s)"
    out = [
        f"Matched: {rule.name}  ({rule.where})",
        f"  captures:      {captures}",
        f"  action:        {action}",
        f"  risk:          {rule.risk}",
    ]
    if rule.kind is not None:  # by method otherwise, as the request line shows
        out.append(f"  kind:          {rule.kind} (the rule says so, whatever the method)")
    if rule.reason:
        out.append(f"  reason:        {rule.reason}")
    if rule.action != "deny":
        out.append(f"  snapshot:      {_snapshot(req, rule, ctx)}")
        out.append(f"  compensation:  {_compensation(req, rule, ctx, default_compensate)}")
    if rule.description:
        out.append(f"  description:   {rule.description}")
    return out


def _default(req: RequestView, default_mutations: str, default_compensate: str) -> list[str]:
    if req.method in READ_METHODS:
        return [f"By default: {req.method} is a read, so it passes (and is journaled)."]
    happens = _DEFAULT_MUTATIONS.get(
        default_mutations, f"defaults.mutations is {default_mutations}"
    )
    out = [
        f"By default: {req.method} is a mutation and defaults.mutations is "
        f"{default_mutations}, so {happens}."
    ]
    if default_mutations != "deny":
        out.append(
            f"Compensation:  {_DEFAULT_COMPENSATE.get(default_compensate, default_compensate)}"
        )
    return out


def _snapshot(req: RequestView, rule: Rule, ctx: TemplateContext) -> str:
    spec = rule.effective_snapshot
    if spec is None:
        return "none"
    if spec.url_template is None:
        url = req.url
    else:
        rendered = render_known(spec.url_template, ctx)
        url = req.resolve(rendered) if isinstance(rendered, str) else str(rendered)
    return f"GET {url} before forwarding (if it fails: {rule.on_snapshot_error})"


def _compensation(req: RequestView, rule: Rule, ctx: TemplateContext, default: str) -> str:
    comp = rule.compensate
    if _is_read(req, rule):
        return "none needed (a read)"
    if comp is None:
        return "not given, so " + _DEFAULT_COMPENSATE.get(default, default)
    if isinstance(comp, str):
        described = GENERIC.get(comp) or PACKS.get(comp)
        return f"{comp}: {described}" if described else comp
    url = render_known(comp.get("url", ""), ctx)
    text = f"{comp.get('method', '?')} {req.resolve(url) if isinstance(url, str) else url}"
    if "body" in comp:
        text += f" body {_compact(render_known(comp['body'], ctx))}"
    if template_references_response(comp):
        text += " (completed from the response)"
    return text


def _request_body(req: RequestView) -> Any:
    doc = req.json
    return None if doc is NOT_JSON else doc


def _body_summary(req: RequestView) -> str:
    doc = req.json
    if doc is NOT_JSON:
        return f"(not JSON, {len(req.body)} bytes)"
    return _compact(doc)


def _compact(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
