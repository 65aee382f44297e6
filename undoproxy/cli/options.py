"""The options commands share (--admin, --config, --by) and what they resolve to."""

from __future__ import annotations

import argparse
import getpass
import os

from undoproxy.client import ADMIN_ENV, AdminClient

CONFIG_ENV = "UNDOPROXY_CONFIG"


def add_admin(p: argparse.ArgumentParser) -> None:
    """Give `p` the --admin option of commands that talk to a running undoproxy."""
    p.add_argument(
        "--admin",
        metavar="URL",
        help=f"admin URL of the running undoproxy (env {ADMIN_ENV}, default http://127.0.0.1:8081)",
    )


def add_config(p: argparse.ArgumentParser) -> None:
    """Give `p` the -c/--config option of commands that read the config file."""
    p.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help=f"config file (env {CONFIG_ENV}; default: built-in defaults)",
    )


def config_path(args: argparse.Namespace) -> str | None:
    """The config file: --config, else UNDOPROXY_CONFIG, else None (the built-in defaults)."""
    return args.config or os.environ.get(CONFIG_ENV) or None


def client(args: argparse.Namespace) -> AdminClient:
    """The admin API client of the undoproxy that --admin names."""
    return AdminClient(args.admin)


def whoami() -> str:
    """Who a decision or a resolution is recorded as when --by is not given."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "cli"
