"""undoproxy itself, not through its admin API: `undoproxy run`, and `verify` of its journal."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from undoproxy.cli.options import config_path
from undoproxy.cli.output import out
from undoproxy.errors import UndoproxyError

# undoproxy.config (rules, packs) is imported inside the commands that read a config: it was
# most of the start-up time of every other command (0.7 of 0.8 s).


def cmd_run(args: argparse.Namespace) -> int:
    """Run the proxy and the admin API/page in one process until Ctrl-C or SIGTERM."""
    from undoproxy import eventloop
    from undoproxy.config import load_config
    from undoproxy.server import serve

    config = load_config(config_path(args))
    logging.basicConfig(
        level=logging.INFO if not args.quiet else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    eventloop.run(serve(config))
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

    from undoproxy.config import load_config
    from undoproxy.store import chain

    config = load_config(config_path(args))
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
        out(f"FAILED: {first}")
        for problem in rest[:20]:
            out(f"  also: {problem}")
        if len(rest) > 20:
            out(f"  and {len(rest) - 20} more")
        return 1
    out(f"ok: {report.steps} steps verified")
    out(
        f"  {report.sessions} sessions, {report.approvals} approvals, "
        f"{report.entries} chain entries; head {report.head}"
    )
    return 0
