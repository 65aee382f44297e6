"""`undoproxy`: run the proxy, point agents at it, and inspect, commit or roll back sessions.

Commands that talk to a running undoproxy find it through --admin / UNDOPROXY_ADMIN
(default http://127.0.0.1:8081) and authenticate with UNDOPROXY_ADMIN_TOKEN (default: the
token `undoproxy run` generated in ~/.undoproxy).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from undoproxy import __version__
from undoproxy.client import ADMIN_ENV, AdminClient
from undoproxy.config import load_config
from undoproxy.errors import ConfigError, UndoproxyError
from undoproxy.store.approvals import APPROVAL_STATES

CONFIG_ENV = "UNDOPROXY_CONFIG"


def _config_path(args: argparse.Namespace) -> str | None:
    return args.config or os.environ.get(CONFIG_ENV) or None


def _client(args: argparse.Namespace) -> AdminClient:
    return AdminClient(args.admin)


def _out(text: str = "") -> None:
    print(text, flush=True)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


# --- commands ------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """Run the proxy and the admin API/page in one process until Ctrl-C or SIGTERM."""
    from undoproxy.server import serve

    config = load_config(_config_path(args))
    logging.basicConfig(
        level=logging.INFO if not args.quiet else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(config))
    return 0


def _agent_setup(args: argparse.Namespace) -> Any:
    """Ask the running undoproxy where agents go (and open the session's own port)."""
    from undoproxy.runtimes.env import Setup

    client = _client(args)
    info = client.call("GET", "/api/info")
    proxy_url, session_port = info["proxy_url"], None
    if args.session:
        created = client.call("POST", "/api/sessions", {"id": args.session})
        proxy_url = created["proxy_url"]
        own = client.call("POST", f"/api/sessions/{quote(args.session, safe='')}/listener")
        session_port = (own["host"], int(own["port"]))
    # The admin API (and loopback) is never reached through the proxy: the CLI's own calls
    # would otherwise become steps of the session they manage.
    # No "::1": Ruby reads NO_PROXY entries up to a colon, so "::1" becomes "1" and every
    # host ending in ".1" (10.0.0.1, 192.168.1.1) would go around undoproxy.
    admin_host = urlsplit(client.base_url).hostname or "127.0.0.1"
    hosts = ["127.0.0.1", "localhost"] + ([] if ":" in admin_host else [admin_host])
    no_proxy = tuple(dict.fromkeys(hosts))
    return Setup(
        proxy_url=proxy_url,
        ca_cert=Path(info["ca_cert"]),
        ca_bundle=Path(info["ca_bundle"]),
        no_proxy=no_proxy,
        session=args.session,
        session_port=session_port,
    )


def agent_env(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (name, value) pairs `undoproxy env` prints; `undoproxy exec` runs CMD with them."""
    from undoproxy.runtimes.env import variables

    return variables(_agent_setup(args))


def cmd_env(args: argparse.Namespace) -> int:
    """Print the environment that sends any runtime through undoproxy (docs/clients.md)."""
    # Covers curl, wget, git, pip, Python, Node (fetch included), Java, Go, Ruby, PHP, boto3.
    # With --session, clients that cannot send proxy credentials (JVMs) get the session's own
    # proxy port.
    from undoproxy.runtimes.env import render

    _out(render(agent_env(args), args.shell))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Name every client (or CMD) that goes around undoproxy or distrusts its CA, with the fix."""
    from undoproxy.doctor import PROBES, Doctor, report
    from undoproxy.runtimes.env import variables

    args.session = args.session or "doctor"
    setup = _agent_setup(args)
    client = _client(args)
    path = f"/api/sessions/{quote(args.session, safe='')}"
    ports = {urlsplit(setup.proxy_url).port or 8080}
    if setup.session_port is not None:
        ports.add(setup.session_port[1])
    doctor = Doctor(
        {**os.environ, **dict(variables(setup))},
        lambda: client.call("GET", path)["steps"],
        ports,
        **({"host": args.canary_host} if args.canary_host else {}),
    )
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    _out(
        f"undoproxy doctor: session {args.session}, canary on {doctor.host} "
        f"(a private CA nothing trusts)"
    )
    status = 0
    try:
        if command:
            findings, status = doctor.command(command)
        else:
            findings = [doctor.probe(probe) for probe in PROBES]
    finally:
        doctor.close()
    _out(report(findings))
    problems = [f for f in findings if f.verdict in ("BYPASS", "TRUST", "FAILED")]
    if problems:
        _out(f"{len(problems)} problem(s); see docs/clients.md for every runtime")
        return 1
    _out("no client went around undoproxy")
    return status


def cmd_sessions(args: argparse.Namespace) -> int:
    """List sessions, newest first."""
    query = f"?state={quote(args.state)}" if args.state else ""
    sessions = _client(args).call("GET", f"/api/sessions{query}")["sessions"]
    if args.json:
        _out(json.dumps(sessions, indent=2))
        return 0
    if not sessions:
        _out("no sessions" + (f" in state {args.state}" if args.state else ""))
        return 0
    rows = [
        [
            s["id"],
            s["state"] + (" (frozen)" if s.get("frozen") else ""),
            str(s["steps"]),
            str(s["mutations"]),
            _when(s["created_at"]),
            s.get("intent") or "",
        ]
        for s in sessions
    ]
    _out(_table(rows, ["SESSION", "STATE", "STEPS", "MUTATIONS", "CREATED", "INTENT"]))
    if _client(args).call("GET", "/api/info").get("frozen_all"):
        _out("every session is frozen (the global switch): `undoproxy unfreeze --all`")
    return 0


def _compensation_text(step: dict[str, Any]) -> str:
    comp = step.get("compensation")
    if not comp:
        return ""
    text = f"{comp['method']} {comp['url']}" if comp.get("method") else comp.get("kind") or "-"
    return text + (f" [{comp['status']}]" if comp.get("status") else "")


def cmd_show(args: argparse.Namespace) -> int:
    """Show a session's timeline: every step, its rule, status and compensation."""
    session = _client(args).call("GET", f"/api/sessions/{quote(args.session, safe='')}")
    if args.json:
        _out(json.dumps(session, indent=2))
        return 0
    _out(
        f"session {session['id']}  state: {session['state']}  steps: {len(session['steps'])}  "
        f"mutations: {session['mutations']}"
        + ("  FROZEN: mutations refused (undoproxy unfreeze)" if session.get("frozen") else "")
    )
    if session.get("intent"):
        _out(f"intent: {session['intent']}")
    if not session["steps"]:
        _out("no requests yet")
        return 0
    rows = []
    for s in session["steps"]:
        rows.append(
            [
                str(s["seq"]),
                time.strftime("%H:%M:%S", time.localtime(s["created_at"])),
                s["method"],
                s["url"],
                s["rule"] or "-",
                s["status"],
                str(s["response_status"] or "-"),
                _compensation_text(s),
            ]
        )
    _out(_table(rows, ["#", "TIME", "METHOD", "URL", "RULE", "STATUS", "HTTP", "COMPENSATION"]))
    intents = [(s["seq"], s["intent"]) for s in session["steps"] if s.get("intent")]
    if intents:
        _out("intents:")
        for seq, intent in intents:
            _out(f"  #{seq}: {intent}")
    resolved = [s for s in session["steps"] if s.get("resolved")]
    if resolved:
        _out("resolved by hand:")
        for s in resolved:
            r = s["resolved"]
            _out(f"  #{s['seq']} {s['id']}: by {r['by']} at {_when(r['at'])}: {r['reason']}")
    return 0


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
    _out(f"{what} session {args.session}, newest step first:")
    report: dict[str, Any] | None = None
    try:
        for message in _client(args).stream("POST", path, body):
            if "step" in message:
                s = message["step"]
                comp = s.get("compensation")
                via = f"  via {comp['method']} {comp['url']}" if comp else ""
                _out(f"  [{_MARK.get(s['status'], '  ')}] #{s['seq']} {s['method']} {s['url']}")
                _out(f"       {s['status']}: {s['detail']}{via}")
            elif "done" in message:
                report = message["done"]
    except KeyboardInterrupt:
        # Only the watching stops: undoproxy finishes the rollback on its own.
        print(
            f"stopped watching; the rollback of {args.session} goes on in undoproxy: "
            f"see `undoproxy show {args.session}`",
            file=sys.stderr,
        )
        return 130
    if report is None:
        raise UndoproxyError("the rollback ended without a report; check `undoproxy show`")
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report["counts"].items()))
    _out(f"session {report['session']}: {report['state']} ({counts or 'no mutations'})")
    if args.dry_run:
        return 0
    if report["state"] != "rolled_back":
        _out(
            "Not everything could be undone and verified: see the steps marked XX, !! or ?? "
            "above. Re-run `undoproxy rollback` to retry what is left (--force to overwrite "
            "conflicts); a step marked ?? was sent but cannot be shown undone: check it by hand."
        )
        return 1
    return 0


def cmd_commit(args: argparse.Namespace) -> int:
    """Commit a session: its effects are kept and it can no longer be rolled back."""
    session = _client(args).call("POST", f"/api/sessions/{quote(args.session, safe='')}/commit")
    _out(f"session {session['id']} is {session['state']}")
    return 0


def _switch(args: argparse.Namespace, on: bool) -> int:
    if (args.session is None) == (not args.all):
        raise UndoproxyError("name one SESSION, or --all for every session")
    verb = "freeze" if on else "unfreeze"
    client = _client(args)
    if args.all:
        answer = client.call("POST", f"/api/{verb}")
        what = "every session is" if on else "the global switch is off:"
    else:
        answer = client.call("POST", f"/api/sessions/{quote(args.session, safe='')}/{verb}")
        what = f"session {answer['id']} is"
    if on:
        _out(
            f"{what} frozen: its mutations are answered 403 undoproxy_frozen and forwarded "
            f"nowhere; reads pass; {_count(answer['denied'], 'held request')} denied"
        )
    elif args.all:
        _out(f"{what} sessions not frozen one by one take mutations again")
    else:
        _out(f"{what} unfrozen: its mutations go through the rules again")
    if not on and not args.all and client.call("GET", "/api/info").get("frozen_all"):
        _out("every session is still frozen by the global switch: `undoproxy unfreeze --all`")
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
    body = {"reason": args.reason, "by": args.by or _whoami()}
    path = f"/api/steps/{quote(args.step, safe='')}/resolve"
    answer = _client(args).call("POST", path, body)
    step, session = answer["step"], answer["session"]
    _out(
        f"step {step['id']} (#{step['seq']} {step['method']} {step['url']}) resolved by "
        f"{step['resolved']['by']}: {step['resolved']['reason']}"
    )
    _out(f"session {session['id']} is {session['state']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a session's steps (secrets redacted) as JSON lines, HAR, CSV or Markdown."""
    text = _client(args).call(
        "GET", f"/api/sessions/{quote(args.session, safe='')}/export?format={args.format}", raw=True
    )
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0


def _err(text: str = "") -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_exec(args: argparse.Namespace) -> int:
    """Run CMD in a session with `undoproxy env`'s environment, then print what it did; exit
    with CMD's status (--rollback-on-failure: a failed CMD's session is rolled back first)."""
    from undoproxy import child
    from undoproxy.client import TOKEN_ENV

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise UndoproxyError("nothing to run: undoproxy exec [OPTIONS] -- CMD [ARGS...]")
    body = {k: v for k, v in (("id", args.session), ("intent", args.intent)) if v}
    session = _client(args).call("POST", "/api/sessions", body)  # no id: a fresh one
    if session["state"] != "open":
        raise UndoproxyError(
            f"session {session['id']} is {session['state']}: it takes no more requests"
        )
    args.session = session["id"]
    # The agent never gets the admin token: it could approve its own held requests.
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env.update(agent_env(args))
    # undoproxy's own lines go to stderr: CMD's stdout stays CMD's, for pipes.
    _err(f"undoproxy exec: session {args.session}: {' '.join(command)}")
    status = child.run(command, env)
    try:
        _err(_summary(_client(args), args.session, status))
        if status != 0 and args.rollback_on_failure:
            with contextlib.redirect_stdout(sys.stderr):
                cmd_rollback(
                    argparse.Namespace(
                        admin=args.admin, session=args.session, force=False, dry_run=False
                    )
                )
    except UndoproxyError as exc:  # CMD's status is still what exec reports
        _err(f"undoproxy: {exc}")
    return status


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _summary(client: AdminClient, session_id: str, status: int) -> str:
    """What a session did: requests, mutations, held and irreversible steps."""
    session = client.call("GET", f"/api/sessions/{quote(session_id, safe='')}")
    steps = session["steps"]
    held = sum(1 for s in steps if s.get("action") == "hold")
    irreversible = sum(
        1
        for s in steps
        if s["status"] == "irreversible"
        or (
            (s.get("compensation") or {}).get("reason")
            and s["status"] in ("succeeded", "unknown", "pending")
        )
    )
    return (
        f"undoproxy exec: exit status {status}; session {session_id} ({session['state']}): "
        f"{_count(len(steps), 'request')}, {_count(session['mutations'], 'mutation')}, "
        f"{held} held, {irreversible} irreversible\n  see `undoproxy show {session_id}`"
    )


def _left(expires_at: float) -> str:
    seconds = max(0, int(expires_at - time.time()))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def cmd_approvals(args: argparse.Namespace) -> int:
    """List held requests waiting for a decision (or, with --state, decided ones)."""
    state = args.state or "pending"
    query = "" if state == "all" else f"?state={quote(state)}"
    approvals = _client(args).call("GET", f"/api/approvals{query}")["approvals"]
    if args.json:
        _out(json.dumps(approvals, indent=2))
        return 0
    if not approvals:
        _out("no approvals" + ("" if state == "all" else f" {state.replace('_', ' ')}"))
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
    _out(_table(rows, ["APPROVAL", "SESSION", "RULE", "RISK", "REQUEST", "BADGES", "STATE"]))
    return 0


def _decide(args: argparse.Namespace, verdict: str) -> int:
    body = {"by": args.by or _whoami()}
    if args.reason:
        body["reason"] = args.reason
    path = f"/api/approvals/{quote(args.id, safe='')}/{verdict}"
    a = _client(args).call("POST", path, body)
    reason = f" ({a['reason']})" if a.get("reason") else ""
    _out(f"{a['id']} {a['state']} by {a['decided_by']}{reason}: {a['method']} {a['url']}")
    return 0


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "cli"


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve a held request: it is forwarded, with any identical ones waiting with it."""
    return _decide(args, "approve")


def cmd_deny(args: argparse.Namespace) -> int:
    """Deny a held request: the agent gets 403 undoproxy_denied and nothing is forwarded."""
    return _decide(args, "deny")


def cmd_rules_check(args: argparse.Namespace) -> int:
    """Validate a config and its rule packs; every mistake is listed with file:line."""
    path = _config_path(args)
    from undoproxy.packs import PACKS_DIR

    config = load_config(path)
    packs = [r for r in config.rules if Path(r.where.file).parent == PACKS_DIR]
    n = len(config.rules.rules) - len(packs)
    text = f"{path or 'built-in defaults'}: OK, {n} rule{'s' if n != 1 else ''}"
    if packs:
        names = ", ".join(dict.fromkeys(r.name.split("/", 1)[0] for r in packs))
        text += f", and {len(packs)} from the packs {names}"
    _out(text)
    return 0


def cmd_rules_explain(args: argparse.Namespace) -> int:
    """Show which rule a request would match, its captures, and why earlier rules did not."""
    from undoproxy.compensators.plan import plan_for
    from undoproxy.credentials import signature_scheme
    from undoproxy.rules import RequestView, format_explanation

    config = load_config(_config_path(args))
    headers = []
    for item in args.header or []:
        name, sep, value = item.partition(":")
        if not sep:
            raise UndoproxyError(f"--header must be 'Name: value', got {item!r}")
        headers.append((name.strip(), value.strip()))
    if args.body is not None and not any(k.lower() == "content-type" for k, _ in headers):
        headers.append(("Content-Type", "application/json"))
    url = args.url if "://" in args.url else "https://" + args.url
    view = RequestView.from_parts(args.method, url, headers, (args.body or "").encode())
    verdicts = config.rules.explain(view)
    irreversible = None
    if config.defaults_mutations == "hold-irreversible":
        signed = signature_scheme(headers)
        if config.signing.for_url(url) is not None:
            signed = None  # undoproxy signs its own requests to this host (signing:)
        plan = plan_for(view, None, {}, auto=config.defaults_compensate == "auto")
        irreversible = f"the request is signed ({signed})" if signed else plan.reason
    _out(
        format_explanation(
            view,
            verdicts,
            default_mutations=config.defaults_mutations,
            default_compensate=config.defaults_compensate,
            hold_at=config.hold_at,
            irreversible=irreversible,
        )
    )
    return 0


def cmd_packs(args: argparse.Namespace) -> int:
    """List the built-in API packs, or (with NAME) one pack's rules."""
    from undoproxy.packs.listing import describe_pack, list_packs

    _out(describe_pack(args.name) if args.name else list_packs())
    return 0


def _verify_postgres(url: str, heads: list[str]) -> Any:
    """`verify` of a PostgreSQL journal (asyncpg only when asked for)."""

    import asyncpg

    from undoproxy.store import chain
    from undoproxy.store.postgres.journal import shown
    from undoproxy.store.postgres.verify import verify

    try:
        return asyncio.run(verify(url, heads=heads))
    except chain.NoChain as exc:
        raise UndoproxyError(str(exc)) from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise UndoproxyError(f"cannot read the journal at {shown(url)}: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    """Check the journal's hash chain; exit 1 naming the first step edited, deleted or added."""
    import sqlite3

    from undoproxy.store import chain

    config = load_config(_config_path(args))
    if config.store_url is not None:
        report = _verify_postgres(config.store_url, list(args.head or ()))
    else:
        path = config.store_path
        if not path.is_file():
            raise UndoproxyError(f"no journal at {path}")
        try:
            report = chain.verify(path, heads=args.head or ())
        except chain.NoChain as exc:
            raise UndoproxyError(str(exc)) from None
        except sqlite3.Error as exc:
            raise UndoproxyError(f"cannot read the journal {path}: {exc}") from None
    if report.problems:
        first, *rest = report.problems
        _out(f"FAILED: {first}")
        for problem in rest[:20]:
            _out(f"  also: {problem}")
        if len(rest) > 20:
            _out(f"  and {len(rest) - 20} more")
        return 1
    _out(f"ok: {report.steps} steps verified")
    _out(
        f"  {report.sessions} sessions, {report.approvals} approvals, "
        f"{report.entries} chain entries; head {report.head}"
    )
    return 0


# --- parser --------------------------------------------------------------------------------


def _add_admin(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--admin",
        metavar="URL",
        help=f"admin URL of the running undoproxy (env {ADMIN_ENV}, default http://127.0.0.1:8081)",
    )


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help=f"config file (env {CONFIG_ENV}; default: built-in defaults)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="undoproxy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"undoproxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        name: str,
        func: Callable[[argparse.Namespace], int],
        *,
        admin: bool = False,
        config: bool = False,
        parent: Any = sub,
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=func.__doc__, description=func.__doc__
        )
        p.set_defaults(func=func)
        if admin:
            _add_admin(p)
        if config:
            _add_config(p)
        return p

    p = command("run", cmd_run, config=True)
    p.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    p = command("env", cmd_env, admin=True)
    p.add_argument("--session", metavar="ID", help="the session the agent's requests belong to")
    p.add_argument(
        "--shell",
        choices=("sh", "fish", "powershell", "dotenv", "json"),
        default="sh",
        help="how to print it (default: sh, for eval)",
    )
    p = command("doctor", cmd_doctor, admin=True)
    p.add_argument("--session", metavar="ID", help="the session to probe in (default: doctor)")
    p.add_argument(
        "--canary-host",
        metavar="ADDR",
        help="the address the canary listens on (default: this machine's own non-loopback "
        "address: runtimes that never proxy loopback would otherwise look like bypasses)",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="run CMD instead of the built-in probes ({canary} in it: the canary's URL)",
    )
    p = command("sessions", cmd_sessions, admin=True)
    p.add_argument("--state", help="only sessions in this state")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command("show", cmd_show, admin=True)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command("rollback", cmd_rollback, admin=True)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    p.add_argument(
        "--force",
        action="store_true",
        help="restore even where the target changed since the agent's write",
    )
    p = command("commit", cmd_commit, admin=True)
    p.add_argument("session", metavar="SESSION")
    for name, func in (("freeze", cmd_freeze), ("unfreeze", cmd_unfreeze)):
        p = command(name, func, admin=True)
        p.add_argument("session", nargs="?", metavar="SESSION")
        p.add_argument("--all", action="store_true", help="every session (the global switch)")
    p = command("resolve", cmd_resolve, admin=True)
    p.add_argument("step", metavar="STEP", help="the step id (see `undoproxy show SESSION`)")
    p.add_argument("--reason", metavar="TEXT", required=True, help="how it was undone by hand")
    p.add_argument("--by", metavar="NAME", help="who undid it (default: your user name)")
    p = command("export", cmd_export, admin=True)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--format", choices=("jsonl", "har", "csv", "md"), default="jsonl")
    p = command("exec", cmd_exec, admin=True)
    p.add_argument("--session", metavar="ID", help="the session to run in (default: a new one)")
    p.add_argument("--intent", metavar="TEXT", help="what the agent is asked to do")
    p.add_argument(
        "--rollback-on-failure",
        action="store_true",
        help="roll the session back when CMD exits non-zero, and print the report",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the agent to run")
    p = command("approvals", cmd_approvals, admin=True)
    p.add_argument(
        "--state",
        choices=(*APPROVAL_STATES, "all"),
        help="which approvals (default: pending)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    for name, func in (("approve", cmd_approve), ("deny", cmd_deny)):
        p = command(name, func, admin=True)
        p.add_argument("id", metavar="ID", help="the approval id (see `undoproxy approvals`)")
        p.add_argument("--reason", metavar="TEXT", help="why (required for critical risk)")
        p.add_argument("--by", metavar="NAME", help="who decides (default: your user name)")
    p = command("verify", cmd_verify, config=True)
    p.add_argument(
        "--head",
        action="append",
        metavar="HASH",
        help="a head an earlier verify printed: fail unless the chain still contains it "
        "(repeatable)",
    )
    p = command("packs", cmd_packs)
    p.add_argument("name", nargs="?", metavar="NAME", help="a pack: list its rules")

    rules = sub.add_parser("rules", help="check rules, or explain which rule a request matches")
    rules_sub = rules.add_subparsers(dest="rules_command", metavar="COMMAND", required=True)
    command("check", cmd_rules_check, config=True, parent=rules_sub)
    p = command("explain", cmd_rules_explain, config=True, parent=rules_sub)
    p.add_argument("method", metavar="METHOD")
    p.add_argument("url", metavar="URL")
    p.add_argument("--body", metavar="JSON", help="the request body")
    p.add_argument(
        "-H",
        "--header",
        action="append",
        metavar="'Name: value'",
        help="a request header (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `undoproxy` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"undoproxy: configuration error:\n{exc}", file=sys.stderr)
        return 2
    except UndoproxyError as exc:
        print(f"undoproxy: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
