"""undoproxy itself, not through its admin API: `undoproxy run`, and `verify` of its journal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from undoproxy.cli.options import config_path
from undoproxy.cli.output import err, out
from undoproxy.config import load_config
from undoproxy.errors import UndoproxyError


def cmd_run(args: argparse.Namespace) -> int:
    """Run the proxy and the admin API/page in one process until Ctrl-C or SIGTERM."""
    from undoproxy import eventloop
    from undoproxy.server import serve

    config = load_config(config_path(args))
    logging.basicConfig(
        level=logging.INFO if not args.quiet else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    eventloop.run(serve(config))
    return 0


VERIFIED_HEAD = "verified-head"  # in the state dir: the head the last verify that passed printed


def _verify_postgres(url: str, heads: list[str], **options: Any) -> Any:
    """`verify` of a PostgreSQL journal (asyncpg only when asked for)."""

    import asyncpg

    from undoproxy.store import chain
    from undoproxy.store.postgres.journal import shown
    from undoproxy.store.postgres.verify import verify

    try:
        return asyncio.run(verify(url, heads=heads, **options))
    except chain.NoChain as exc:
        raise UndoproxyError(str(exc)) from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise UndoproxyError(f"cannot read the journal at {shown(url)}: {exc}") from None


def _progress(what: str, done: int, total: int) -> None:
    share = f" ({done * 100 // total}%)" if total else ""
    err(f"verify: {what} {done:,} of {total:,}{share}")


def _since(args: argparse.Namespace, state_dir: Path) -> str | None:
    """The head `--since` names (`last`: the one the last verify that passed recorded)."""
    if args.since != "last":
        return str(args.since) if args.since else None
    try:
        return (state_dir / VERIFIED_HEAD).read_text().strip() or None
    except OSError:
        raise UndoproxyError(
            f"no head recorded in {state_dir / VERIFIED_HEAD}: run a full `undoproxy verify` first"
        ) from None


def cmd_verify(args: argparse.Namespace) -> int:
    """Check the journal's hash chain; exit 1 naming the first step edited, deleted or added.

    Streams the journal (constant memory); `--since HEAD` checks only what came after a head
    an earlier verify printed (`--since last`: the last one that passed)."""
    import sqlite3

    from undoproxy.store import chain, chainscan

    config = load_config(config_path(args))
    since = _since(args, config.state_dir)
    options: dict[str, Any] = {
        "since": since,
        "progress": _progress if args.progress or sys.stderr.isatty() else None,
    }
    try:
        if config.store_url is not None:
            report = _verify_postgres(config.store_url, list(args.head or ()), **options)
        else:
            path = config.store_path
            if not path.is_file():
                raise UndoproxyError(f"no journal at {path}")
            try:
                report = chainscan.verify_sqlite(path, heads=args.head or (), **options)
            except chain.NoChain as exc:
                raise UndoproxyError(str(exc)) from None
            except sqlite3.Error as exc:
                raise UndoproxyError(f"cannot read the journal {path}: {exc}") from None
    except ValueError as exc:  # --since a head the chain does not have
        raise UndoproxyError(str(exc)) from None
    if report.problems:
        first, *rest = report.problems
        out(f"FAILED: {first}")
        for problem in rest[:20]:
            out(f"  also: {problem}")
        if len(rest) + report.more > 20:
            out(f"  and {len(rest) - 20 + report.more} more")
        return 1
    verified = "steps verified" if since is None else f"steps verified since head {since[:16]}"
    out(f"ok: {report.steps} {verified}")
    cut = f" (the chain starts after archive {report.archive})" if report.archive else ""
    out(
        f"  {report.sessions} sessions, {report.approvals} approvals, "
        f"{report.entries} chain entries{cut}; head {report.head}"
    )
    _record(config.state_dir, report.head)
    return 0


def _record(state_dir: Path, head: str) -> None:
    """Keep the head that passed, for `--since last` (best effort: verify is read-only)."""
    with contextlib.suppress(OSError):
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / VERIFIED_HEAD).write_text(head + "\n")
