"""Pointing agents at undoproxy: `undoproxy env`, `doctor` and `exec`."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from undoproxy.cli.control import cmd_rollback
from undoproxy.cli.options import client
from undoproxy.cli.output import count, err, out
from undoproxy.client import AdminClient
from undoproxy.errors import UndoproxyError


def _agent_setup(args: argparse.Namespace) -> Any:
    """Ask the running undoproxy where agents go (and open the session's own port)."""
    from undoproxy.runtimes.env import Setup

    admin = client(args)
    info = admin.call("GET", "/api/info")
    proxy_url, session_port = info["proxy_url"], None
    if args.session:
        created = admin.call("POST", "/api/sessions", {"id": args.session})
        warning = closed_warning(created, bool(info.get("frozen_all")))
        if warning:
            err(warning)
        proxy_url = created["proxy_url"]
        own = admin.call("POST", f"/api/sessions/{quote(args.session, safe='')}/listener")
        session_port = (own["host"], int(own["port"]))
    # The admin API (and loopback) is never reached through the proxy: the CLI's own calls
    # would otherwise become steps of the session they manage.
    # No "::1": Ruby reads NO_PROXY entries up to a colon, so "::1" becomes "1" and every
    # host ending in ".1" (10.0.0.1, 192.168.1.1) would go around undoproxy.
    admin_host = urlsplit(admin.base_url).hostname or "127.0.0.1"
    hosts = ["127.0.0.1", "localhost"] + ([] if ":" in admin_host else [admin_host])
    no_proxy = tuple(dict.fromkeys(hosts))
    # The placeholders of the secrets the session may use (never a real value: the API has
    # none to give).
    query = f"?session={quote(args.session, safe='')}" if args.session else ""
    placeholders = admin.call("GET", f"/api/secrets/placeholders{query}")["variables"]
    return Setup(
        proxy_url=proxy_url,
        ca_cert=Path(info["ca_cert"]),
        ca_bundle=Path(info["ca_bundle"]),
        no_proxy=no_proxy,
        session=args.session,
        session_port=session_port,
        placeholders=tuple(placeholders.items()),
    )


def closed_warning(session: dict[str, Any], frozen_all: bool) -> str | None:
    """What `env` tells on stderr when the session it hands out takes no mutations, or None.

    Still printing the environment keeps an agent that is already started this way on
    undoproxy (refused, not unjournaled); the warning says why its writes will fail and what
    to do instead."""
    name = session["id"]
    if session["state"] != "open":
        return (
            f"undoproxy: warning: session {name} is {session['state']}: its mutations will be "
            f"refused (409 undoproxy_session_closed), its reads still pass. Start the agent in "
            f"a new session instead: --session {_next_name(name)}"
        )
    if session.get("frozen") or frozen_all:
        which = "every session is frozen" if frozen_all else f"session {name} is frozen"
        fix = "undoproxy unfreeze --all" if frozen_all else f"undoproxy unfreeze {name}"
        return (
            f"undoproxy: warning: {which}: its mutations will be refused "
            f"(403 undoproxy_frozen), its reads still pass, until `{fix}`"
        )
    return None


def _next_name(name: str) -> str:
    """`demo` -> `demo-2`, `demo-2` -> `demo-3`: a suggestion for a fresh session id."""
    stem, _, number = name.rpartition("-")
    if stem and number.isdigit():
        return f"{stem}-{int(number) + 1}"
    return f"{name}-2"


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

    out(render(agent_env(args), args.shell))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Name every client (or CMD) that goes around undoproxy or distrusts its CA, with the fix."""
    from undoproxy.doctor import PROBES, CommandNotFound, Doctor, report
    from undoproxy.doctor.placeholders import real_secrets_in
    from undoproxy.runtimes.env import agent_process_env, variables

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if command and shutil.which(command[0]) is None:  # before anything is started or printed
        raise CommandNotFound(f"command not found: {command[0]}", 127)
    args.session = args.session or "doctor"
    setup = _agent_setup(args)
    admin = client(args)
    path = f"/api/sessions/{quote(args.session, safe='')}"
    ports = {urlsplit(setup.proxy_url).port or 8080}
    if setup.session_port is not None:
        ports.add(setup.session_port[1])
    doctor = Doctor(
        agent_process_env(os.environ, variables(setup)),
        lambda: admin.call("GET", path)["steps"],
        ports,
        tls_failures=lambda: admin.call("GET", path + "/tls-failures")["failures"],
        **({"host": args.canary_host} if args.canary_host else {}),
    )
    out(
        f"undoproxy doctor: session {args.session}, canary on {doctor.host} "
        f"(a private CA nothing trusts)"
    )
    status = 0
    # First: no real secret of `secrets:` in the agent's environment (only placeholders).
    findings = real_secrets_in(doctor.env, lambda body: admin.call("POST", _CHECK, body))
    try:
        if command:
            ran, status = doctor.command(command)
            findings += ran
        else:
            findings += [doctor.probe(probe) for probe in PROBES]
    finally:
        doctor.close()
    out(report(findings))
    problems = [f for f in findings if f.verdict in ("BYPASS", "TRUST", "FAILED", "SECRET")]
    if problems:
        out(f"{len(problems)} problem(s); see docs/clients.md for every runtime")
        return 1
    out("no client went around undoproxy")
    return status


_CHECK = "/api/secrets/check"


def cmd_exec(args: argparse.Namespace) -> int:
    """Run CMD in a session with `undoproxy env`'s environment, then print what it did; exit
    with CMD's status (--rollback-on-failure: a failed CMD's session is rolled back first)."""
    from undoproxy import child
    from undoproxy.runtimes.env import agent_process_env

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise UndoproxyError("nothing to run: undoproxy exec [OPTIONS] -- CMD [ARGS...]")
    body = {k: v for k, v in (("id", args.session), ("intent", args.intent)) if v}
    session = client(args).call("POST", "/api/sessions", body)  # no id: a fresh one
    if session["state"] != "open":
        raise UndoproxyError(
            f"session {session['id']} is {session['state']}: it takes no more requests"
        )
    args.session = session["id"]
    # The agent never gets the admin token (it could approve its own held requests) nor the
    # credentials key: the same rule as doctor's.
    env = agent_process_env(os.environ, agent_env(args))
    # undoproxy's own lines go to stderr: CMD's stdout stays CMD's, for pipes.
    err(f"undoproxy exec: session {args.session}: {' '.join(command)}")
    status = child.run(command, env)
    try:
        err(_summary(client(args), args.session, status))
        if status != 0 and args.rollback_on_failure:
            with contextlib.redirect_stdout(sys.stderr):
                cmd_rollback(
                    argparse.Namespace(
                        admin=args.admin, session=args.session, force=False, dry_run=False
                    )
                )
    except UndoproxyError as exc:  # CMD's status is still what exec reports
        err(f"undoproxy: {exc}")
    return status


def _summary(admin: AdminClient, session_id: str, status: int) -> str:
    """What a session did: requests, mutations, held and irreversible steps."""
    path = f"/api/sessions/{quote(session_id, safe='')}"
    session = admin.call("GET", f"{path}?limit=1")
    steps = list(admin.pages(path, "steps"))  # every page
    held = session["held"]
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
        f"{count(len(steps), 'request')}, {count(session['mutations'], 'mutation')}, "
        f"{held} held, {irreversible} irreversible\n  see `undoproxy show {session_id}`"
    )
