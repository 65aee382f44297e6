"""A real CalDAV server (Radicale's WSGI application on cheroot, over TLS) keeping its calendars
in a temporary folder.

One user with a plain htpasswd password, so a compensation only succeeds if undoproxy replayed
the agent's credentials. The calendars on disk (each event's `.ics` file and each collection's
`.Radicale.props`, Radicale's caches left out) are the truth a test compares with.
"""

from __future__ import annotations

from pathlib import Path

import caldav
import radicale
import radicale.config

from tests.support.servers import TlsWsgiServer

USER, PASSWORD = "agent", "cal-SECRET-9"


class Radicale(TlsWsgiServer):
    """Serves calendars under `root` from start() until stop(); `base_url` is
    https://127.0.0.1:PORT."""

    def __init__(self, root: Path, cert: tuple[Path, Path]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "users").write_text(f"{USER}:{PASSWORD}\n")
        configuration = radicale.config.load()
        configuration.update(
            {
                "auth": {
                    "type": "htpasswd",
                    "htpasswd_filename": str(root / "users"),
                    "htpasswd_encryption": "plain",
                },
                "storage": {"filesystem_folder": str(root / "collections")},
                "rights": {"type": "owner_only"},
                "logging": {"level": "warning"},
            },
            "test",
            privileged=True,
        )
        super().__init__(radicale.Application(configuration), cert)

    @property
    def home(self) -> str:
        """The user's calendar home, where its calendars are made."""
        return f"{self.base_url}/{USER}/"

    def client(self, proxy: str | None = None, ca_bundle: str | None = None) -> caldav.DAVClient:
        """A `caldav` client: straight to the server, or through `proxy` trusting `ca_bundle`."""
        client = caldav.DAVClient(
            self.home,
            username=USER,
            password=PASSWORD,
            proxy=proxy,
            ssl_verify_cert=ca_bundle or str(self.cert[0]),
        )
        client.session.trust_env = False  # no NO_PROXY or CA bundle from the machine
        return client

    def on_disk(self) -> dict[str, bytes]:
        """Every event file and collection property file, byte for byte, by path."""
        home = self.root / "collections" / "collection-root" / USER
        return {
            p.relative_to(home).as_posix(): p.read_bytes()
            for p in sorted(home.rglob("*"))
            if p.is_file() and ".Radicale.cache" not in p.parts and p.name != ".Radicale.lock"
        }
