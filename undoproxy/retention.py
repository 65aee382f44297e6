"""Retention on a schedule: with `retention.after` set, a running undoproxy archives the
sessions committed or rolled back and idle for longer than that, every `retention.every`
(`store/archiving.py` says how; on PostgreSQL one replica at a time does it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from undoproxy.admin.archive_api import archive_path
from undoproxy.config import Config
from undoproxy.errors import UndoproxyError
from undoproxy.store import archiving
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)
FIRST = 60.0  # seconds after start-up before the first look (start-up stays quick)


async def once(journal: Journal, config: Config, now: float | None = None) -> archiving.Result:
    """One archive run as the config says."""
    now = time.time() if now is None else now
    to = None
    if config.retention_dir is not None:
        config.retention_dir.mkdir(parents=True, exist_ok=True)
        to = archive_path(config.retention_dir, now)
    result = await archiving.archive(journal, idle_before=now - config.retention_after, to=to)
    if result.sessions:
        where = f"to {result.file}" if result.file else "deleted"
        log.info(
            "retention: archived %d session(s), %d step(s) %s",
            result.sessions,
            result.steps,
            where,
        )
    elif to is not None:
        with contextlib.suppress(OSError):
            if to.exists() and to.stat().st_size == 0:
                to.unlink()  # nothing went into it
    return result


async def run_forever(journal: Journal, config: Config) -> None:
    """Archive every `retention.every` until cancelled; a failed run is logged, not fatal."""
    delay = min(FIRST, config.retention_every)
    while True:
        await asyncio.sleep(delay)
        delay = config.retention_every
        try:
            await once(journal, config)
        except (UndoproxyError, OSError) as exc:
            log.error("retention: the archive run failed: %s", exc)
