"""How an approval is shown: the API's JSON (also the page's and the event stream's) and the
webhook's text. Everything in them was redacted when the approval was built."""

from __future__ import annotations

import re
from typing import Any

from undoproxy.approvals.notify import slack_code, slack_text
from undoproxy.store.approvals import Approval
from undoproxy.store.journal import Journal


def approval_json(approval: Approval, journal: Journal) -> dict[str, Any]:
    """An approval with its context: who asked, what, under which rule, and what it would do."""
    session = journal.sessions.get(approval.session_id)
    ctx = approval.context
    return {
        "id": approval.id,
        "state": approval.state,
        "session_id": approval.session_id,
        # The request's own X-Undoproxy-Intent, else the session's.
        "intent": ctx.get("intent") or (session.intent if session else None),
        "agent": session.agent if session else None,
        "rule": approval.rule,
        "risk": approval.risk,
        "reason_required": approval.risk == "critical",
        "method": approval.method,
        "url": approval.url,
        "host": ctx.get("host"),
        "content_type": ctx.get("content_type"),
        "body": ctx.get("body"),
        "body_length": ctx.get("body_length", 0),
        "headers": ctx.get("headers", []),
        "method_overrides": ctx.get("method_overrides", []),
        "hold_reason": ctx.get("hold_reason"),
        "badges": ctx.get("badges", []),
        "diff": ctx.get("diff"),
        "diff_error": ctx.get("diff_error"),
        "step_id": approval.step_id,
        "step_ids": list(approval.step_ids),
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "decided_at": approval.decided_at,
        "decided_by": approval.decided_by,
        "reason": approval.reason,
    }


def approval_link(admin_url: str, approval_id: str) -> str:
    """Where the admin page shows this approval."""
    return f"{admin_url.rstrip('/')}/#approval/{approval_id}"


def notify_text(approval: Approval, admin_url: str) -> str:
    """The webhook message (Slack mrkdwn) for a newly held request; every value in it is
    escaped (approvals/notify.py), so an agent's session id or URL cannot become markup."""
    rule = approval.rule or "defaults.mutations"
    risk = f", risk {slack_text(approval.risk)}" if approval.risk else ""
    lines = [
        f"undoproxy is holding a request for approval (session {slack_code(approval.session_id)}, "
        f"rule {slack_code(rule)}{risk})",
        slack_code(f"{approval.method} {approval.url}"),
    ]
    if approval.context.get("hold_reason"):
        lines.append(f"held because: {slack_text(approval.context['hold_reason'])}")
    for override in approval.context.get("method_overrides", []):
        shown = re.sub(r"[^A-Za-z0-9_.-]", "?", override["method"])  # no mrkdwn in it
        lines.append(f"*method override*: {slack_text(override['where'])} = `{shown}`")
    labels = [slack_text(b["label"]) for b in approval.context.get("badges", [])]
    if labels:
        lines.append("badges: " + ", ".join(labels))
    if admin_url:
        lines.append(f"Approve or deny: {slack_text(approval_link(admin_url, approval.id))}")
    return "\n".join(lines)
