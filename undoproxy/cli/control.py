"""Changing a session: `undoproxy rollback`, `commit`, `resolve`, the kill switch
(`freeze`, `unfreeze`), and retention (`archive`)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any
from urllib.parse import quote

from undoproxy.cli.options import client, whoami
from undoproxy.cli.output import count, err, out, shown
from undoproxy.errors import UndoproxyError

_MARK = {
    "compensated": "ok",
    "unverified": "??",
    "skipped": "--",
    "planned": "..",
    "conflict": "!!",
    "failed": "XX",
    "irreversible": "XX",
}


def cmd_rollback(args: argparse.Namespace) -> int:
    """Undo a session's mutations, newest first; exit 0 only when it is fully rolled back."""
    path = f"/api/sessions/{quote(args.session, safe='')}/rollback"
    body = {"force": args.force, "dry_run": args.dry_run}
    what = "Plan for rolling back" if args.dry_run else "Rolling back"
    out(f"{what} session {shown(args.session)}, newest step first:")
    report: dict[str, Any] | None = None
    try:
        for message in client(args).stream("POST", path, body):
            if "step" in message:
                s = message["step"]
                comp = s.get("compensation")
                via = f"  via {shown(comp['method'])} {shown(comp['url'])}" if comp else ""
                mark = _MARK.get(s["status"], "  ")
                out(f"  [{mark}] #{s['seq']} {shown(s['method'])} {shown(s['url'])}")
                out(f"       {shown(s['status'])}: {shown(s['detail'])}{via}")
            elif "done" in message:
                report = message["done"]
    except KeyboardInterrupt:
        # Only the watching stops: undoproxy finishes the rollback on its own.
        err(
            f"stopped watching; the rollback of {shown(args.session)} goes on in undoproxy: "
            f"see `undoproxy show {shown(args.session)}`"
        )
        return 130
    if report is None:
        raise UndoproxyError("the rollback ended without a report; check `undoproxy show`")
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report["counts"].items()))
    out(f"session {report['session']}: {report['state']} ({counts or 'no mutations'})")
    if args.dry_run:
        return 0
    if report["state"] != "rolled_back":
        out(
            "Not everything could be undone and verified: see the steps marked XX, !! or ?? "
            "above. Re-run `undoproxy rollback` to retry what is left (--force to overwrite "
            "conflicts); a step marked ?? was sent but cannot be shown undone: check it by hand."
        )
        return 1
    return 0


def cmd_commit(args: argparse.Namespace) -> int:
    """Commit a session: its effects are kept and it can no longer be rolled back."""
    session = client(args).call("POST", f"/api/sessions/{quote(args.session, safe='')}/commit")
    out(f"session {session['id']} is {session['state']}")
    return 0


def _switch(args: argparse.Namespace, on: bool) -> int:
    if (args.session is None) == (not args.all):
        raise UndoproxyError("name one SESSION, or --all for every session")
    verb = "freeze" if on else "unfreeze"
    admin = client(args)
    if args.all:
        answer = admin.call("POST", f"/api/{verb}")
        what = "every session is" if on else "the global switch is off:"
    else:
        answer = admin.call("POST", f"/api/sessions/{quote(args.session, safe='')}/{verb}")
        what = f"session {answer['id']} is"
    if on:
        out(
            f"{what} frozen: its mutations are answered 403 undoproxy_frozen and forwarded "
            f"nowhere; reads pass; {count(answer['denied'], 'held request')} denied"
        )
    elif args.all:
        out(f"{what} sessions not frozen one by one take mutations again")
    else:
        out(f"{what} unfrozen: its mutations go through the rules again")
    if not on and not args.all and admin.call("GET", "/api/info").get("frozen_all"):
        out("every session is still frozen by the global switch: `undoproxy unfreeze --all`")
    return 0


def cmd_freeze(args: argparse.Namespace) -> int:
    """Kill switch: refuse every mutation of SESSION (or of all, --all) and deny its held
    requests; reads pass. Kept across restarts until `undoproxy unfreeze`."""
    return _switch(args, True)


def cmd_unfreeze(args: argparse.Namespace) -> int:
    """Turn the kill switch off for SESSION (or the global one, --all)."""
    return _switch(args, False)


def cmd_resolve(args: argparse.Namespace) -> int:
    """Record that a person undid a step by hand (one rollback could not undo): it becomes
    resolved, and its session rolled_back once every mutation step is undone."""
    body = {"reason": args.reason, "by": args.by or whoami()}
    path = f"/api/steps/{quote(args.step, safe='')}/resolve"
    answer = client(args).call("POST", path, body)
    step, session = answer["step"], answer["session"]
    out(
        f"step {step['id']} (#{step['seq']} {shown(step['method'])} {shown(step['url'])}) "
        f"resolved by {shown(step['resolved']['by'])}: {shown(step['resolved']['reason'])}"
    )
    out(f"session {session['id']} is {session['state']}")
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    """Move sessions committed or rolled back and idle for longer than --older-than out of the
    journal, into an archive file (--to) or nowhere (--delete); the chain records what left,
    so `undoproxy verify` still passes and still finds tampering."""
    body: dict[str, Any] = {"older_than": args.older_than, "dry_run": args.dry_run}
    if args.to:
        body["to"] = os.path.abspath(args.to)  # the path is read by undoproxy, from its cwd
    if args.delete:
        body["delete"] = True
    done = client(args).call("POST", "/api/archive", body, timeout=3600)
    if args.json:
        out(json.dumps(done, indent=2))
        return 0
    what = (
        f"{count(done['sessions'], 'session')} ({count(done['steps'], 'step')}, "
        f"{count(done['approvals'], 'approval')})"
    )
    if done["dry_run"]:
        out(f"would archive {what}")
    elif not done["sessions"]:
        out("nothing to archive")
    else:
        where = f"to {done['file']}" if done["file"] else "deleted (no archive file)"
        out(f"archived {what} {where}")
        out(
            f"  chain cut: {done['chain_entries']:,} entries; {done['carried']:,} rows chained "
            f"again; archive {', '.join(done['archives'])}"
        )
    return 0
