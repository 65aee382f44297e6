"""Which journal a config asks for: SQLite (`store.path`) or PostgreSQL (`store.url`)."""

from __future__ import annotations

from undoproxy.config import Config
from undoproxy.credentials import CredentialBox
from undoproxy.events import EventBus
from undoproxy.store.base import Store
from undoproxy.store.journal import Journal


async def open_store(
    config: Config, events: EventBus | None = None, box: CredentialBox | None = None
) -> Journal:
    """Open (create, migrate, recover) the configured journal; UndoproxyError when it cannot.

    `box` seals the bodies a compensation replays (`store/bodies.py`)."""
    if config.store_url is None:
        return await Journal.open(config.store_path, events, box)
    from undoproxy.store.postgres.journal import PgJournal  # asyncpg only when asked for

    return await PgJournal.connect(config.store_url, events, box, heartbeat=config.store_heartbeat)


def describe(config: Config, journal: Journal) -> str:
    """Where the journal is, for the banner (never a password)."""
    if config.store_url is None:
        return str(config.store_path)
    from undoproxy.store.postgres.journal import PgJournal, shown

    replica = f" (replica {journal.replica})" if isinstance(journal, PgJournal) else ""
    return shown(config.store_url) + replica


def as_store(journal: Journal) -> Store:
    """`journal` as the interface (`base.Store`): mypy checks here that the SQLite journal, and
    so the PostgreSQL one that extends it, implements every part of it."""
    return journal
