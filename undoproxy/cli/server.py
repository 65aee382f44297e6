"""undoproxy itself, not through its admin API: `undoproxy run`, and `verify` of its journal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from undoproxy.cli.options import config_path
from undoproxy.cli.output import err, out
from undoproxy.errors import UndoproxyError

if TYPE_CHECKING:
    from undoproxy.config import Config

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

    from undoproxy.store import chain_verify
    from undoproxy.store.postgres.journal import shown
    from undoproxy.store.postgres.verify import verify

    try:
        return asyncio.run(verify(url, heads=heads, **options))
    except chain_verify.NoChain as exc:
        raise UndoproxyError(str(exc)) from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise UndoproxyError(f"cannot read the journal at {shown(url)}: {exc}") from None


def _chain_keys(config: Config, key_files: list[str]) -> tuple[dict[str, Any], str]:
    """The chain keys verify checks with: the installation's credentials key (as `undoproxy
    run` finds it, never created here) and any --key-file; and where they came from."""
    from undoproxy.credentials import KEY_ENV, KEY_FILE, CredentialBox
    from undoproxy.store.chain import keyring

    boxes = []
    current = CredentialBox.existing(config.state_dir)
    if current is not None:
        boxes.append(current)
    for name in key_files:
        try:
            data = Path(name).expanduser().read_bytes().strip()
        except OSError as exc:
            raise UndoproxyError(f"cannot read --key-file {name}: {exc.strerror}") from None
        boxes.append(CredentialBox.from_key(data, name))
    where = (
        f"no credentials key found ({KEY_ENV} is unset and {config.state_dir / KEY_FILE} does "
        "not exist): keyed entries cannot be checked without it"
        if current is None
        else ""
    )
    return keyring(*boxes), where


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
    """Check the journal's keyed hash chain; exit 1 naming the first step edited, deleted or
    added, or the first chain entry edited, inserted, appended or deleted.

    Streams the journal (constant memory); `--since HEAD` checks only what came after a head
    an earlier verify printed (`--since last`: the last one that passed); `--archive FILE`
    checks archive files too, with the same keys."""
    import sqlite3

    from undoproxy.config import load_config
    from undoproxy.store import chain_verify, chainscan

    config = load_config(config_path(args))
    keys, no_key = _chain_keys(config, list(args.key_file or ()))
    since = _since(args, config.state_dir)
    files = _archive_files(args, config, keys) if args.archive else []
    options: dict[str, Any] = {
        "since": since,
        "progress": _progress if args.progress or sys.stderr.isatty() else None,
        "archived_heads": {h for checked in files for h in checked.heads},
        "keys": keys,
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
            except chain_verify.NoChain as exc:
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
        if no_key:
            out(f"  ({no_key})")
        return 1
    for checked in files:
        members = checked.members
        out(
            f"archive {checked.path}: ok, {len(members)} batch(es), "
            f"{sum(m.sessions for m in members)} sessions, {sum(m.steps for m in members)} steps"
            + ("" if checked.keyed or not members else " (NOT KEYED: from before keyed chains)")
        )
    if report.problems:
        first, *rest = report.problems
        out(f"FAILED: {first}")
        for problem in rest[:20]:
            out(f"  also: {problem}")
        if len(rest) + report.more > 20:
            out(f"  and {len(rest) - 20 + report.more} more")
        if no_key:
            out(f"  ({no_key})")
        return 1
    verified = "steps verified" if since is None else f"steps verified since head {since[:16]}"
    out(f"ok: {report.steps} {verified}")
    cut = f" (the chain starts after archive {report.archive})" if report.archive else ""
    out(
        f"  {report.sessions} sessions, {report.approvals} approvals, "
        f"{report.entries} chain entries{cut}; head {report.head}"
    )
    out(_keyed_line(report))
    _record(config.state_dir, report.head)
    return 0


def _keyed_line(report: Any) -> str:
    """What the keys vouch for: the whole chain, or from which entry on."""
    if report.keyed_from is None:
        if not report.entries:
            return "  no new entries" if report.since else "  the chain is empty"
        return (
            "  NOT KEYED: no entry carries a key (a journal from before keyed chains that no "
            "undoproxy since has written to): anyone who can write the file can recompute an "
            "unkeyed chain; start undoproxy once to key it"
        )
    keys = ", ".join(report.key_ids)
    if not report.unkeyed:
        checked = "since that head" if report.since else "throughout"
        return f"  keyed {checked} (chain key {keys})"
    return (
        f"  keyed from entry {report.keyed_from} on (chain key {keys}); the "
        f"{report.unkeyed} entries before it date from before keyed chains: checked as "
        "SHA-256, and covered by the keyed entry after them"
    )


def _archive_files(args: argparse.Namespace, config: Any, keys: dict[str, Any]) -> list[Any]:
    """Each archive file checked on its own (its entries with `keys`) and against the
    journal's `archives` rows."""
    from undoproxy.store import archivefile

    recorded = _recorded(config)
    checked: list[archivefile.FileCheck] = []
    for name in args.archive:
        path = Path(name)
        if not path.is_file():
            raise UndoproxyError(f"no archive file {path}")
        found = archivefile.check_file(path, heads=args.head or (), keys=keys)
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
