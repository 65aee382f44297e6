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

    from undoproxy.config import load_config
    from undoproxy.store import chain, chainscan

    config = load_config(config_path(args))
    since = _since(args, config.state_dir)
    files = _archive_files(args, config) if args.archive else []
    options: dict[str, Any] = {
        "since": since,
        "progress": _progress if args.progress or sys.stderr.isatty() else None,
        "archived_heads": {h for checked in files for h in checked.heads},
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
    file_problems = _file_problems(files)
    if file_problems:
        out(f"FAILED: {file_problems[0]}")
        for problem in file_problems[1:21]:
            out(f"  also: {problem}")
        return 1
    for checked in files:
        members = checked.members
        out(
            f"archive {checked.path}: ok, {len(members)} batch(es), "
            f"{sum(m.sessions for m in members)} sessions, {sum(m.steps for m in members)} steps"
        )
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


def _archive_files(args: argparse.Namespace, config: Any) -> list[Any]:
    """Each archive file checked on its own and against the journal's `archives` rows."""
    from undoproxy.store import archivefile

    recorded = _recorded(config)
    checked: list[archivefile.FileCheck] = []
    for name in args.archive:
        path = Path(name)
        if not path.is_file():
            raise UndoproxyError(f"no archive file {path}")
        found = archivefile.check_file(path, heads=args.head or ())
        found.problems += archivefile.against_journal(found, recorded)
        before = checked[-1].members if checked else []
        if before and found.members and found.members[0].cut_before != before[-1].cut:
            found.problems.append(f"{path} does not start where {checked[-1].path} ended")
        checked.append(found)
    return checked


def _file_problems(files: list[Any]) -> list[str]:
    return [problem for checked in files for problem in checked.problems]


def _recorded(config: Any) -> dict[str, dict[str, Any]]:
    """The journal's `archives` rows, id -> row."""
    sql = "SELECT id, sha256, chain_seq, chain_hash FROM archives"
    if config.store_url is not None:
        import asyncpg

        async def read() -> list[Any]:
            conn = await asyncpg.connect(config.store_url)
            try:
                return list(await conn.fetch(sql))
            finally:
                await conn.close()

        try:
            rows = asyncio.run(read())
        except (OSError, asyncpg.PostgresError) as exc:
            raise UndoproxyError(f"cannot read the journal's archives: {exc}") from None
        return {r["id"]: dict(r) for r in rows}
    import sqlite3
    from urllib.parse import quote

    try:
        db = sqlite3.connect(f"file:{quote(str(config.store_path))}?mode=ro", uri=True)
        try:
            db.row_factory = sqlite3.Row
            return {r["id"]: dict(r) for r in db.execute(sql)}
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise UndoproxyError(f"cannot read the journal's archives: {exc}") from None


def _record(state_dir: Path, head: str) -> None:
    """Keep the head that passed, for `--since last` (best effort: verify is read-only)."""
    with contextlib.suppress(OSError):
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / VERIFIED_HEAD).write_text(head + "\n")
