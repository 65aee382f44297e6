"""undoproxy itself, not through its admin API: `undoproxy run`, and `verify` of its journal."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import Any

from undoproxy.cli.options import config_path
from undoproxy.cli.output import out
from undoproxy.config import Config, load_config
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


def _verify_postgres(url: str, heads: list[str], keys: dict[str, Any]) -> Any:
    """`verify` of a PostgreSQL journal (asyncpg only when asked for)."""

    import asyncpg

    from undoproxy.store import chain_verify
    from undoproxy.store.postgres.journal import shown
    from undoproxy.store.postgres.verify import verify

    try:
        return asyncio.run(verify(url, heads=heads, keys=keys))
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


def cmd_verify(args: argparse.Namespace) -> int:
    """Check the journal's keyed hash chain; exit 1 naming the first step edited, deleted or
    added, or the first chain entry edited, inserted, appended or deleted."""
    import sqlite3

    from undoproxy.store import chain_verify

    config = load_config(config_path(args))
    keys, no_key = _chain_keys(config, list(args.key_file or ()))
    if config.store_url is not None:
        report = _verify_postgres(config.store_url, list(args.head or ()), keys)
    else:
        path = config.store_path
        if not path.is_file():
            raise UndoproxyError(f"no journal at {path}")
        try:
            report = chain_verify.verify(path, heads=args.head or (), keys=keys)
        except chain_verify.NoChain as exc:
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
        if no_key:
            out(f"  ({no_key})")
        return 1
    out(f"ok: {report.steps} steps verified")
    out(
        f"  {report.sessions} sessions, {report.approvals} approvals, "
        f"{report.entries} chain entries; head {report.head}"
    )
    out(_keyed_line(report))
    return 0


def _keyed_line(report: Any) -> str:
    """What the keys vouch for: the whole chain, or from which entry on."""
    if report.keyed_from is None:
        if not report.entries:
            return "  the chain is empty"
        return (
            "  NOT KEYED: no entry carries a key (a journal from before keyed chains that no "
            "undoproxy since has written to): anyone who can write the file can recompute an "
            "unkeyed chain; start undoproxy once to key it"
        )
    keys = ", ".join(report.key_ids)
    if not report.unkeyed:
        return f"  keyed throughout (chain key {keys})"
    return (
        f"  keyed from entry {report.keyed_from} on (chain key {keys}); the "
        f"{report.unkeyed} entries before it date from before keyed chains: checked as "
        "SHA-256, and covered by the keyed entry after them"
    )
