"""Reading sessions: `undoproxy sessions`, `show` and `export`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from urllib.parse import quote

from undoproxy.cli.options import client
from undoproxy.cli.output import out, table, when


def cmd_sessions(args: argparse.Namespace) -> int:
    """List sessions, newest first."""
    query = f"?state={quote(args.state)}" if args.state else ""
    sessions = client(args).call("GET", f"/api/sessions{query}")["sessions"]
    if args.json:
        out(json.dumps(sessions, indent=2))
        return 0
    if not sessions:
        out("no sessions" + (f" in state {args.state}" if args.state else ""))
        return 0
    rows = [
        [
            s["id"],
            s["state"] + (" (frozen)" if s.get("frozen") else ""),
            str(s["steps"]),
            str(s["mutations"]),
            when(s["created_at"]),
            s.get("intent") or "",
        ]
        for s in sessions
    ]
    out(table(rows, ["SESSION", "STATE", "STEPS", "MUTATIONS", "CREATED", "INTENT"]))
    if client(args).call("GET", "/api/info").get("frozen_all"):
        out("every session is frozen (the global switch): `undoproxy unfreeze --all`")
    return 0


def _compensation_text(step: dict[str, Any]) -> str:
    comp = step.get("compensation")
    if not comp:
        return ""
    text = f"{comp['method']} {comp['url']}" if comp.get("method") else comp.get("kind") or "-"
    return text + (f" [{comp['status']}]" if comp.get("status") else "")


WHY_WIDTH = 80  # characters of a step's reason `show` prints; --wide prints all of it


def why(step: dict[str, Any]) -> str:
    """Why a step did not simply succeed (or cannot be undone), from what the journal says:
    the step's own error, its compensation's detail once that did not end well, or why no
    compensation exists."""
    comp = step.get("compensation") or {}
    if step.get("error"):
        return str(step["error"])
    if comp.get("status") not in (None, "compensated", "skipped") and comp.get("detail"):
        return str(comp["detail"])
    if comp.get("reason"):
        return f"no undo: {comp['reason']}"
    if step["status"] == "failed" and step.get("response_status"):
        return f"the upstream answered {step['response_status']}"
    return ""


def _step_row(step: dict[str, Any], wide: bool) -> list[str]:
    reason = " ".join(why(step).split())
    if not wide and len(reason) > WHY_WIDTH:
        reason = reason[: WHY_WIDTH - 1] + "…"
    return [
        str(step["seq"]),
        step["id"],
        time.strftime("%H:%M:%S", time.localtime(step["created_at"])),
        step.get("kind") or ("mutation" if step.get("mutation") else "read"),
        step["method"],
        step["url"],
        step["rule"] or "-",
        step["status"],
        str(step["response_status"] or "-"),
        _compensation_text(step),
        reason,
    ]


def cmd_show(args: argparse.Namespace) -> int:
    """Show a session's timeline: every step with its id, kind, rule, status, compensation and,
    where it failed or cannot be undone, why (--wide: the reasons in full)."""
    session = client(args).call("GET", f"/api/sessions/{quote(args.session, safe='')}")
    if args.json:
        out(json.dumps(session, indent=2))
        return 0
    out(
        f"session {session['id']}  state: {session['state']}  steps: {len(session['steps'])}  "
        f"mutations: {session['mutations']}"
        + ("  FROZEN: mutations refused (undoproxy unfreeze)" if session.get("frozen") else "")
    )
    if session.get("intent"):
        out(f"intent: {session['intent']}")
    if not session["steps"]:
        out("no requests yet")
        return 0
    rows = [_step_row(s, args.wide) for s in session["steps"]]
    header = ["#", "STEP", "TIME", "KIND", "METHOD", "URL", "RULE", "STATUS", "HTTP"]
    header += ["COMPENSATION", "WHY"]
    out(table(rows, header))
    intents = [(s["seq"], s["intent"]) for s in session["steps"] if s.get("intent")]
    if intents:
        out("intents:")
        for seq, intent in intents:
            out(f"  #{seq}: {intent}")
    resolved = [s for s in session["steps"] if s.get("resolved")]
    if resolved:
        out("resolved by hand:")
        for s in resolved:
            r = s["resolved"]
            out(f"  #{s['seq']} {s['id']}: by {r['by']} at {when(r['at'])}: {r['reason']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a session's steps (secrets redacted) as JSON lines, HAR, CSV or Markdown."""
    text = client(args).call(
        "GET", f"/api/sessions/{quote(args.session, safe='')}/export?format={args.format}", raw=True
    )
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0
