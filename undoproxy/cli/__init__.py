"""`undoproxy`: run the proxy, point agents at it, and inspect, commit or roll back sessions.

Commands that talk to a running undoproxy find it through --admin / UNDOPROXY_ADMIN
(default http://127.0.0.1:8081) and authenticate with UNDOPROXY_ADMIN_TOKEN (default: the
token `undoproxy run` generated in ~/.undoproxy).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from undoproxy import __version__
from undoproxy.cli import agents, approvals, control, packkit, rules, server, sessions
from undoproxy.cli.options import add_admin, add_config
from undoproxy.cli.output import err, shown
from undoproxy.errors import ConfigError, UndoproxyError
from undoproxy.store.approvals import APPROVAL_STATES


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
            add_admin(p)
        if config:
            add_config(p)
        return p

    p = command("run", server.cmd_run, config=True)
    p.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    p = command("env", agents.cmd_env, admin=True)
    p.add_argument("--session", metavar="ID", help="the session the agent's requests belong to")
    p.add_argument(
        "--shell",
        choices=("sh", "fish", "powershell", "dotenv", "json"),
        default="sh",
        help="how to print it (default: sh, for eval)",
    )
    p = command("doctor", agents.cmd_doctor, admin=True)
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
    p = command("sessions", sessions.cmd_sessions, admin=True)
    p.add_argument("--state", help="only sessions in this state")
    p.add_argument("--limit", type=positive, metavar="N", help="the newest N only (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command("show", sessions.cmd_show, admin=True)
    p.add_argument("session", metavar="SESSION")
    p.add_argument(
        "--limit",
        type=positive,
        default=sessions.SHOWN,
        metavar="N",
        help=f"print the newest N steps (default {sessions.SHOWN})",
    )
    p.add_argument("--all", action="store_true", help="print every step")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--wide", action="store_true", help="print each step's reason in full")
    p = command("rollback", control.cmd_rollback, admin=True)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    p.add_argument(
        "--force",
        action="store_true",
        help="restore even where the target changed since the agent's write",
    )
    p = command("commit", control.cmd_commit, admin=True)
    p.add_argument("session", metavar="SESSION")
    for name, func in (("freeze", control.cmd_freeze), ("unfreeze", control.cmd_unfreeze)):
        p = command(name, func, admin=True)
        p.add_argument("session", nargs="?", metavar="SESSION")
        p.add_argument("--all", action="store_true", help="every session (the global switch)")
    p = command("resolve", control.cmd_resolve, admin=True)
    p.add_argument("step", metavar="STEP", help="the step id (see `undoproxy show SESSION`)")
    p.add_argument("--reason", metavar="TEXT", required=True, help="how it was undone by hand")
    p.add_argument("--by", metavar="NAME", help="who undid it (default: your user name)")
    p = command("export", sessions.cmd_export, admin=True)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--format", choices=("jsonl", "har", "csv", "md"), default="jsonl")
    p = command("exec", agents.cmd_exec, admin=True)
    p.add_argument("--session", metavar="ID", help="the session to run in (default: a new one)")
    p.add_argument("--intent", metavar="TEXT", help="what the agent is asked to do")
    p.add_argument(
        "--rollback-on-failure",
        action="store_true",
        help="roll the session back when CMD exits non-zero, and print the report",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the agent to run")
    p = command("approvals", approvals.cmd_approvals, admin=True)
    p.add_argument(
        "--state",
        choices=(*APPROVAL_STATES, "all"),
        help="which approvals (default: pending)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    for name, func in (("approve", approvals.cmd_approve), ("deny", approvals.cmd_deny)):
        p = command(name, func, admin=True)
        p.add_argument("id", metavar="ID", help="the approval id (see `undoproxy approvals`)")
        p.add_argument("--reason", metavar="TEXT", help="why (required for critical risk)")
        p.add_argument("--by", metavar="NAME", help="who decides (default: your user name)")
    p = command("archive", control.cmd_archive, admin=True)
    p.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="sessions committed or rolled back and idle for longer than this (30d, 12h)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--to", metavar="PATH", help="a new archive file, or a directory for one")
    where.add_argument("--delete", action="store_true", help="remove them without an archive file")
    p.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command("verify", server.cmd_verify, config=True)
    p.add_argument(
        "--head",
        action="append",
        metavar="HASH",
        help="a head an earlier verify printed: fail unless the chain still contains it "
        "(repeatable)",
    )
    p.add_argument(
        "--key-file",
        action="append",
        metavar="FILE",
        help="an earlier credentials key (a Fernet key file), for entries written before the "
        "key was changed (repeatable; the current one is found as undoproxy run finds it)",
    )
    p.add_argument(
        "--since",
        metavar="HEAD",
        help="check only what came after this head (an earlier verify printed it); "
        "`last`: the head of the last verify that passed",
    )
    p.add_argument(
        "--archive",
        action="append",
        metavar="FILE",
        help="also check an archive file `undoproxy archive` wrote, on its own and against "
        "the journal (repeatable, oldest first)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="say how far it is on stderr (default: when stderr is a terminal)",
    )
    p = command("packs", packkit.cmd_packs)
    p.add_argument(
        "name",
        nargs="?",
        metavar="NAME | new | record | test",
        help="a pack: list its rules; new NAME: a skeleton of your own; record SESSION: a "
        "session as test cases; test PACK --against URL: prove its undos (see --help of each)",
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    group = sub.add_parser("rules", help="check rules, or explain which rule a request matches")
    rules_sub = group.add_subparsers(dest="rules_command", metavar="COMMAND", required=True)
    command("check", rules.cmd_rules_check, config=True, parent=rules_sub)
    p = command("explain", rules.cmd_rules_explain, config=True, parent=rules_sub)
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


def positive(value: str) -> int:
    """An argument that must be a whole number of at least 1."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value!r}")
    return int(value)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `undoproxy` console script."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except ConfigError as exc:
        err(f"undoproxy: configuration error:\n{exc}")
        return 2
    except UndoproxyError as exc:
        # The admin API's message may quote outside text (a session id, a URL): one line.
        err(f"undoproxy: {shown(exc)}")
        return int(getattr(exc, "exit_status", 1))
    except KeyboardInterrupt:
        print("undoproxy: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`undoproxy show X | head -1`): like any Unix filter, stop
        # quietly. What is still buffered for stdout goes nowhere, not into a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a filter a pipe stopped


if __name__ == "__main__":
    sys.exit(main())
