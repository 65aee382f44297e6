"""The options commands share (--admin, --config, --by) and what they resolve to."""

from __future__ import annotations

import argparse
import getpass
import os

from undoproxy.client import (
    ADMIN_ENV,
    AdminClient,
    find_admin_url,
    find_token,
    listen_url,
    running_admin_url,
)

CONFIG_ENV = "UNDOPROXY_CONFIG"


def add_admin(p: argparse.ArgumentParser) -> None:
    """Give `p` the --admin and -c options of commands that talk to a running undoproxy."""
    p.add_argument(
        "--admin",
        metavar="URL",
        help=f"admin URL of the running undoproxy (env {ADMIN_ENV}, default http://127.0.0.1:8081)",
    )
    p.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help=f"the config `undoproxy run` was started with (env {CONFIG_ENV}): the running "
        "undoproxy and its admin token are found through its state_dir and admin keys",
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
    return getattr(args, "config", None) or os.environ.get(CONFIG_ENV) or None


def client(args: argparse.Namespace) -> AdminClient:
    """The admin API client of the running undoproxy: --admin, else the one the config
    (-c / UNDOPROXY_CONFIG) describes, else UNDOPROXY_ADMIN, else the one whose state dir is
    ~/.undoproxy (UNDOPROXY_STATE_DIR), else http://127.0.0.1:8081. With a config, its token is
    admin.token or the one generated in its state_dir."""
    path = config_path(args)
    if path is None:
        return AdminClient(getattr(args, "admin", None))
    from undoproxy.config import load_config

    config = load_config(path)
    url = getattr(args, "admin", None) or running_admin_url(config.state_dir)
    if url is None:
        host, port = config.admin_listen
        url = listen_url(host, port) if port else find_admin_url(config.state_dir)
    token = config.admin_token or find_token(config.state_dir)
    return AdminClient(url, token)


def whoami() -> str:
    """Who a decision or a resolution is recorded as when --by is not given."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "cli"
