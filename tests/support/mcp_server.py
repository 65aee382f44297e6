"""A real MCP server, built with the `mcp` SDK (FastMCP) and served over Streamable HTTP by
uvicorn in its own thread: a small file store with tools whose annotations say what they do.

    read_file(path)            readOnlyHint     the file's text
    list_files()               readOnlyHint     the names
    write_file(path, text)     idempotentHint   stores it
    delete_file(path)          destructiveHint  removes it
    github.create_issue(title)                  a made-up issue number (a dotted tool name)
    login(user, password)                       "welcome USER" (its password must be redacted)

`files` is the store, `calls` the name of every tool call that reached the server, `paths`
the path and query of every HTTP request. `json_response=True` answers each POST with JSON
instead of a server-sent event stream; `cert` serves HTTPS.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.fastmcp import FastMCP
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations


class McpServer:
    """FastMCP over Streamable HTTP on 127.0.0.1 (a port of its own) until stop()."""

    def __init__(
        self,
        *,
        json_response: bool = False,
        cert: tuple[Path, Path] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.files: dict[str, str] = {"hello.txt": "hello world"}
        self.calls: list[str] = []
        self.paths: list[str] = []
        self.host = host
        self.scheme = "https" if cert else "http"
        mcp = FastMCP(
            "files",
            json_response=json_response,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._tools(mcp)
        self.app = mcp.streamable_http_app()
        self._sock = socket.socket()
        self._sock.bind((host, 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self._recorded,
            log_level="warning",
            lifespan="on",
            interface="asgi3",
            timeout_graceful_shutdown=1,
            ssl_certfile=str(cert[0]) if cert else None,
            ssl_keyfile=str(cert[1]) if cert else None,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"{self.base_url}/mcp"

    async def _recorded(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The app, noting the path and query of every HTTP request."""
        if scope["type"] == "http":
            query = scope.get("query_string", b"").decode()
            self.paths.append(scope["path"] + (f"?{query}" if query else ""))
        await self.app(scope, receive, send)

    def _tools(self, mcp: FastMCP[Any]) -> None:
        read_only = ToolAnnotations(readOnlyHint=True)

        @mcp.tool(annotations=read_only)
        def read_file(path: str) -> str:
            """The text of a file."""
            self.calls.append("read_file")
            return self.files[path]

        @mcp.tool(annotations=read_only)
        def list_files() -> list[str]:
            """The names of the files."""
            self.calls.append("list_files")
            return sorted(self.files)

        @mcp.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
        def write_file(path: str, text: str) -> str:
            """Store a file."""
            self.calls.append("write_file")
            self.files[path] = text
            return f"wrote {len(text)} characters to {path}"

        @mcp.tool(annotations=ToolAnnotations(destructiveHint=True))
        def delete_file(path: str) -> str:
            """Remove a file."""
            self.calls.append("delete_file")
            del self.files[path]
            return f"deleted {path}"

        @mcp.tool(name="github.create_issue")
        def create_issue(title: str) -> dict[str, Any]:
            """Open an issue (made up)."""
            self.calls.append("github.create_issue")
            return {"number": 42, "title": title}

        @mcp.tool()
        def login(user: str, password: str) -> str:
            """Sign in (made up)."""
            self.calls.append("login")
            return f"welcome {user}"

    def start(self) -> McpServer:
        self._thread.start()
        for _ in range(200):
            if self._server.started:
                return self
            threading.Event().wait(0.05)
        raise RuntimeError("the MCP server did not start")

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        with contextlib.suppress(OSError):
            self._sock.close()
