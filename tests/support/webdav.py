"""A real WebDAV server (WsgiDAV on cheroot, over TLS) serving a temporary folder.

Basic auth with one user, so a compensation only succeeds if undoproxy replayed the agent's
credentials. The folder on disk and the properties the server keeps (dead properties, locks,
read with PROPFIND straight from the server) are the truth a test compares with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests
from wsgidav.wsgidav_app import WsgiDAVApp

from tests.support.proc import Undoproxy
from tests.support.servers import TlsWsgiServer
from undoproxy.compensators import davxml

USER, PASSWORD = "agent", "dav-SECRET-7"


def agent(up: Undoproxy, session: str) -> requests.Session:
    """The agent's requests session through `up`, with the WebDAV user's Basic auth."""
    s = up.agent(session)
    s.auth = (USER, PASSWORD)
    return s


class WebDav(TlsWsgiServer):
    """Serves `root` from start() until stop(); `base_url` is https://127.0.0.1:PORT."""

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
                "property_manager": True,  # dead properties, kept in memory
                "lock_storage": True,
            }
        )
        super().__init__(app, cert)

    # --- the server's own view, not through undoproxy ---------------------------------------

    def direct(self) -> requests.Session:
        """A session straight to the server (not through undoproxy)."""
        s = requests.Session()
        s.trust_env = False
        s.auth = (USER, PASSWORD)
        s.verify = str(self.cert[0])
        return s

    def propfind(self, path: str, props: list[str] | None = None) -> davxml.Resource:
        """The resource at `path` as a Depth: 0 PROPFIND shows it."""
        with self.direct() as s:
            r = s.request(
                "PROPFIND",
                self.base_url + path,
                headers={"Depth": "0"},
                data=davxml.propfind_body(props),
            )
        assert r.status_code == 207, r.text
        return davxml.resource(r.content, self.base_url + path)

    def set_props(self, path: str, **values: str) -> None:
        """Set dead properties `{urn:test}NAME` on `path`, straight on the server."""
        elems = {
            f"{{urn:test}}{k}": f'<T:{k} xmlns:T="urn:test">{v}</T:{k}>' for k, v in values.items()
        }
        with self.direct() as s:
            r = s.request(
                "PROPPATCH",
                self.base_url + path,
                data=davxml.proppatch_body(elems, []),
                headers={"Content-Type": "application/xml"},
            )
        assert r.status_code == 207 and "200 OK" in r.text, r.text

    def state(self) -> dict[str, Any]:
        """Every file and folder under the root: its bytes (None for a folder), its dead
        properties as the server answers them (exact XML text), and its locks."""
        out: dict[str, Any] = {}
        for path in sorted(self.root.rglob("*")):
            rel = "/" + path.relative_to(self.root).as_posix() + ("/" if path.is_dir() else "")
            res = self.propfind(rel)
            out[rel] = (
                None if path.is_dir() else path.read_bytes(),
                res.dead(),
                sorted(res.lock_tokens()),
            )
        return out
