"""Which compensation a mutation gets, decided before it is forwarded.

A rule's `compensate:` wins; a rule without one, or no rule, gets the REST inverse inferred
from the method when `defaults.compensate: auto` (PUT/PATCH: restore, DELETE: recreate,
POST: delete-created), else the step is irreversible.
"""

from __future__ import annotations

from typing import Any

from undoproxy.compensators import rpc
from undoproxy.compensators.catalog import NEEDS_SNAPSHOT
from undoproxy.compensators.model import Irreversible, Plan, origin, parse_form
from undoproxy.compensators.packs import PACK_SNAPSHOTS
from undoproxy.rules import Rule, TemplateContext, TemplateError, render_url
from undoproxy.rules.request import NOT_JSON, RequestView

INFERRED = {"PUT": "restore", "PATCH": "restore", "DELETE": "recreate", "POST": "delete-created"}


def _pack_plan(name: str, request: RequestView) -> Plan:
    """A pack that says itself what to read before the request (an S3 object and its tags)."""
    try:
        urls = PACK_SNAPSHOTS[name](request.method, request.url, request.body)
    except Irreversible as exc:
        return Plan("irreversible", reason=str(exc))
    return Plan(name, snapshot_url=urls[0] if urls else None, more_snapshots=tuple(urls[1:]))


def snapshot_url(rule: Rule | None, request: RequestView, captures: dict[str, str]) -> str:
    """The URL to snapshot: the rule's `snapshot.url` (captures filled in), else the request's."""
    spec = rule.effective_snapshot if rule is not None else None
    if spec is None or spec.url_template is None:
        return request.url
    # Form bodies (Stripe, Slack) are read as their fields: `${request.body.channel}`.
    body = parse_form(request.body) if request.json is NOT_JSON else request.json
    rendered = render_url(spec.url_template, TemplateContext(captures=captures, request_body=body))
    return request.resolve(rendered)


def plan_for(
    request: RequestView, rule: Rule | None, captures: dict[str, str], *, auto: bool
) -> Plan:
    """The compensation plan of a mutation (with the email pack's correction, if any)."""
    plan = _plan_for(request, rule, captures, auto=auto)
    elsewhere = [
        u
        for u in (plan.snapshot_url, *plan.more_snapshots)
        if u and origin(u) != origin(request.url)
    ]
    if elsewhere:
        # A read there shows nothing about the resource the agent changed: it could only
        # "verify" an undo that never touched it.
        scheme, place = origin(elsewhere[0])
        plan = Plan(
            "irreversible",
            reason=f"the snapshot URL the rule gives is on another origin ({scheme}://{place}) "
            "than the request: a read there cannot show this step undone",
        )
    plan.correction = correction_of(rule)
    return plan


def correction_of(rule: Rule | None) -> dict[str, str] | None:
    """The correction a rule carries, as plain data for the compensator."""
    if rule is None or rule.correction is None:
        return None
    c = rule.correction
    return {"provider": c.provider, "subject": c.subject, "text": c.text}


def _plan_for(
    request: RequestView, rule: Rule | None, captures: dict[str, str], *, auto: bool
) -> Plan:
    compensate: str | dict[str, Any] | None = rule.compensate if rule is not None else None
    try:
        if compensate == "none":
            return Plan(
                "irreversible", reason=f"rule {rule.name if rule else ''} says compensate: none"
            )
        if isinstance(compensate, dict) and rpc.is_spec(compensate):
            return Plan("rpc", template=compensate)  # its read: compensators/rpc.py
        if isinstance(compensate, dict):
            wants_snapshot = rule is not None and rule.snapshot_needed()
            url = snapshot_url(rule, request, captures) if wants_snapshot else None
            return Plan("template", snapshot_url=url, template=compensate)
        if isinstance(compensate, str) and compensate in PACK_SNAPSHOTS:
            return _pack_plan(compensate, request)
        if isinstance(compensate, str):
            url = (
                snapshot_url(rule, request, captures)
                if (compensate in NEEDS_SNAPSHOT or (rule and rule.snapshot))
                else None
            )
            return Plan(compensate, snapshot_url=url)
    except TemplateError as exc:
        return Plan("irreversible", reason=f"the snapshot URL cannot be built: {exc}")
    inferred = INFERRED.get(request.method)
    if not auto or inferred is None:
        why = (
            "no rule gives a compensation and defaults.compensate is none"
            if not auto
            else f"no compensation is known for {request.method}"
        )
        return Plan("irreversible", reason=why)
    try:
        url = snapshot_url(rule, request, captures) if inferred in NEEDS_SNAPSHOT else None
    except TemplateError as exc:
        return Plan("irreversible", reason=f"the snapshot URL cannot be built: {exc}")
    return Plan(inferred, snapshot_url=url, inferred=True)
