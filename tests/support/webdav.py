"""A real WebDAV server (WsgiDAV on cheroot, over TLS) serving a temporary folder.

Basic auth with one user, so a compensation only succeeds if undoproxy replayed the agent's
credentials. The folder on disk is the truth a test compares with.
"""

from __future__ import annotations

import threading
from pathlib import Path

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter
from wsgidav.wsgidav_app import WsgiDAVApp

USER, PASSWORD = "agent", "dav-SECRET-7"


class WebDav:
    """Serves `root` until stop(); `base_url` is https://127.0.0.1:PORT."""

    def __init__(self, root: Path, cert: tuple[Path, Path]) -> None:
        self.root = root
        app = WsgiDAVApp(
            {
                "provider_mapping": {"/": str(root)},
                "http_authenticator": {
                    "accept_basic": True,
                    "accept_digest": False,
                    "default_to_digest": False,
                },
                "simple_dc": {"user_mapping": {"*": {USER: {"password": PASSWORD}}}},
                "verbose": 0,
                "logging": {"enable": False},
                "dir_browser": {"enable": True},
            }
        )
        self._server = wsgi.Server(("127.0.0.1", 0), app)
        self._server.ssl_adapter = BuiltinSSLAdapter(str(cert[0]), str(cert[1]))
        self._thread = threading.Thread(target=self._server.serve, daemon=True)

    def start(self) -> WebDav:
        self._server.prepare()
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self._server.bind_addr[1]}"

    def stop(self) -> None:
        self._server.stop()
        self._thread.join(10)
