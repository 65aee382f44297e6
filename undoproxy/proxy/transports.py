"""The asyncio streams behind one of mitmproxy's live connections.

mitmproxy's layers are sans-IO; the streams belong to the connection handler that the
Proxyserver addon keeps per agent connection. Three addons need them: the spool pump waits
for an upstream's write buffer (proxy/uploads.py), the upload planner pauses an agent's
socket (proxy/upload_plan.py), and the wider reads replace a reader (proxy/reads.py).
"""

from __future__ import annotations

from typing import Any

from mitmproxy import connection


def connection_io(proxyserver: Any, client_id: str, conn: connection.Connection) -> Any:
    """The `ConnectionIO` (its `reader` and `writer`) of `conn`, a connection of the agent
    connection `client_id`; None once it is gone."""
    handler = proxyserver.connections.get(client_id)
    return handler.transports.get(conn) if handler is not None else None
