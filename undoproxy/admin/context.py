"""What the admin app needs from the running undoproxy, in one typed object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from undoproxy.approvals.queue import ApprovalQueue
from undoproxy.config import Config
from undoproxy.inflight import InFlight
from undoproxy.rollback import Rollback
from undoproxy.store.journal import Journal


@dataclass
class AdminContext:
    """Shared state of one running undoproxy, as the admin app sees it."""

    config: Config
    journal: Journal
    token: str
    ca_cert: Path
    ca_bundle: Path
    proxy_address: tuple[str, int]
    rollback: Rollback | None = None
    approvals: ApprovalQueue | None = None
    inflight: InFlight | None = None  # the proxy's forwarded, unanswered mutations

    def proxy_url(self, session_id: str | None = None, token: str | None = None) -> str:
        """The proxy URL an agent sets, with credentials when a session is given."""
        host, port = self.proxy_address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        creds = f"{session_id}:{token or ''}@" if session_id else ""
        return f"http://{creds}{host}:{port}"


CONTEXT: web.AppKey[AdminContext] = web.AppKey("undoproxy", AdminContext)
