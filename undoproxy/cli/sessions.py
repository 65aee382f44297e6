"""Reading sessions: `undoproxy sessions`, `show` and `export`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from urllib.parse import quote

from undoproxy.cli.options import client
from undoproxy.cli.output import TerminalLines, out, shown, table, when

SHOWN = 100  # steps `show` prints unless asked for more (--limit, --all)


def cmd_sessions(args: argparse.Namespace) -> int:
    """List sessions, newest first (every one, page after page; --limit N: the newest N)."""
    query = f"?state={quote(args.state)}" if args.state else ""
    admin = client(args)
    sessions = list(admin.pages(f"/api/sessions{query}", "sessions", limit=args.limit))
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
    if len(sessions) < admin.total:
        out(f"the newest {len(sessions):,} of {admin.total:,} sessions (--limit N for more)")
    if admin.call("GET", "/api/info").get("frozen_all"):
        out("every session is frozen (the global switch): `undoproxy unfreeze --all`")
    return 0


def _compensation_text(step: dict[str, Any]) -> str:
    comp = step.get("compensation")
    if not comp:
        return ""
    text = f"{comp['method']} {comp['url']}" if comp.get("method") else comp.get("kind") or "-"
    return text + (f" [{comp['status']}]" if comp.get("status") else "")


def timeline(args: argparse.Namespace) -> dict[str, Any]:
    """The session with its newest `args.limit` steps (`args.all`: every one), in order,
    fetched a page at a time; `total` says how many it has."""
    admin = client(args)
    path = f"/api/sessions/{quote(args.session, safe='')}"
    wanted = None if args.all else args.limit
    session: dict[str, Any] = admin.call("GET", f"{path}?limit=1")  # 404: said plainly
    newest = list(admin.pages(f"{path}?order=desc", "steps", limit=wanted))
    session["steps"] = newest[::-1]
    session["total"] = admin.total
    session["next"] = None
    return session


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
    """Show a session's timeline: its newest steps (--limit N, --all for every one), each with
    its id, kind, rule, status, compensation and, where it failed or cannot be undone, why
    (--wide: the reasons in full)."""
    session = timeline(args)
    if args.json:
        out(json.dumps(session, indent=2))
        return 0
    out(
        f"session {shown(session['id'])}  state: {session['state']}  "
        f"steps: {session['total']}  "
        f"mutations: {session['mutations']}"
        + ("  FROZEN: mutations refused (undoproxy unfreeze)" if session.get("frozen") else "")
    )
    if len(session["steps"]) < session["total"]:
        out(
            f"the newest {len(session['steps']):,} of {session['total']:,} steps "
            f"(--limit N or --all for more, `undoproxy export` for every one)"
        )
    if session.get("intent"):
        out(f"intent: {shown(session['intent'])}")
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
            out(f"  #{seq}: {shown(intent)}")
    resolved = [s for s in session["steps"] if s.get("resolved")]
    if resolved:
        out("resolved by hand:")
        for s in resolved:
            r = s["resolved"]
            out(
                f"  #{s['seq']} {s['id']}: by {shown(r['by'])} at {when(r['at'])}: "
                f"{shown(r['reason'])}"
            )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a session's steps (secrets redacted) as JSON lines, HAR, CSV or Markdown,
    written as it arrives (a session of any size)."""
    sys.stdout.flush()
    path = f"/api/sessions/{quote(args.session, safe='')}/export?format={args.format}"
    if sys.stdout.isatty():
        # On a terminal, the same safe lines as every other command; into a file or a pipe,
        # the export exactly as undoproxy wrote it.
        with TerminalLines() as lines:
            client(args).download(path, lines)
        return 0
    last = client(args).download(path, sys.stdout.buffer)
    if last not in (b"", b"\n"):
        sys.stdout.buffer.write(b"\n")
    sys.stdout.buffer.flush()
    return 0
