"""Held requests: `undoproxy approvals`, `approve` and `deny`."""

from __future__ import annotations

import argparse
import json
import time
from urllib.parse import quote

from undoproxy.cli.options import client, whoami
from undoproxy.cli.output import out, shown, table


def _left(expires_at: float) -> str:
    seconds = max(0, int(expires_at - time.time()))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def cmd_approvals(args: argparse.Namespace) -> int:
    """List held requests waiting for a decision (or, with --state, decided ones)."""
    state = args.state or "pending"
    query = "" if state == "all" else f"?state={quote(state)}"
    admin = client(args)
    approvals = list(admin.pages(f"/api/approvals{query}", "approvals"))  # every page
    if args.json:
        out(json.dumps(approvals, indent=2))
        return 0
    if not approvals:
        out("no approvals" + ("" if state == "all" else f" {state.replace('_', ' ')}"))
        return 0
    rows = [
        [
            a["id"],
            a["session_id"],
            a["rule"] or "-",
            a["risk"] or "-",
            f"{a['method']} {a['url']}",
            ", ".join(b["label"] for b in a["badges"]),
            f"times out in {_left(a['expires_at'])}"
            if a["state"] == "pending"
            else f"{a['state']} by {a['decided_by'] or '-'}: {a['reason'] or ''}".rstrip(": "),
        ]
        for a in approvals
    ]
    out(table(rows, ["APPROVAL", "SESSION", "RULE", "RISK", "REQUEST", "BADGES", "STATE"]))
    return 0


def _decide(args: argparse.Namespace, verdict: str) -> int:
    body = {"by": args.by or whoami()}
    if args.reason:
        body["reason"] = args.reason
    path = f"/api/approvals/{quote(args.id, safe='')}/{verdict}"
    a = client(args).call("POST", path, body)
    reason = f" ({shown(a['reason'])})" if a.get("reason") else ""
    out(
        f"{a['id']} {a['state']} by {shown(a['decided_by'])}{reason}: "
        f"{shown(a['method'])} {shown(a['url'])}"
    )
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve a held request: it is forwarded, with any identical ones waiting with it."""
    return _decide(args, "approve")


def cmd_deny(args: argparse.Namespace) -> int:
    """Deny a held request: the agent gets 403 undoproxy_denied and nothing is forwarded."""
    return _decide(args, "deny")
